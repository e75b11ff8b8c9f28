"""Closed-loop evaluation of an OpenVLA-OFT policy on MetaWorld under reduction settings: success per task and the
end-to-end step time per setting (the reduction table).

The policy (``--vla_path``: by default the shipped one, ``prismatic_tr/assets/metaworld_policy``, which
``vla_scripts/train_metaworld_policy.py`` made; a run of that command leaves its own in ``<output_dir>/policy``)
runs ``--episodes`` episodes of every task of ``--tasks`` from the seed split ``--split`` ("test": held-out goals;
"validation" for choosing) unreduced and under every ``--settings`` spec (``prismatic_tr.vla.spec``; default: the table's eight,
``prismatic_tr.policy.metaworld.TABLE_SETTINGS``). The same seeds for every task and setting. ``predict_action`` at
batch 1 on the first episode's first observation is timed for every setting round-robin, before the episodes.

    python vla_scripts/eval_metaworld.py                    # the shipped policy, the table's eight settings
    python vla_scripts/eval_metaworld.py --vla_path P --settings "[none,vision:diverse:0.1@0.25]" --tasks "[reach-v3]"

A cut-off run resumes: each finished (setting, task) job is journaled in ``--output_dir``'s ``episodes.jsonl``, and
the same command again (or one with settings added) runs only the jobs missing for that checkpoint, split and
episode count (``--resume false`` starts afresh); every setting is timed again in each run, interleaved.

Writes ``results.json`` (one record per setting: per-task success with Wilson 95 % intervals and failed seeds, the
mean over tasks, tokens, timings; the command and machine in ``meta``) and ``results.csv`` (one row per setting and
task) into ``--output_dir``. Needs the metaworld extra and OSMesa (``METAWORLD=1 bash scripts/setup_env.sh``); never
imports tensorflow. Bad flags exit with status 2 before the model is loaded.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

from collections.abc import Sequence
from typing import Any

from prismatic_tr.cli import BadInputError, command_line, parse_config_or_exit, report_bad_input, run_command
from prismatic_tr.policy.metaworld_eval import (
    JOURNAL,
    EvalMetaWorldConfig,
    csv_rows,
    run_eval_metaworld,
    table,
    write_results,
)

PROG = "eval_metaworld.py"
__all__ = ["JOURNAL", "EvalMetaWorldConfig", "cli", "csv_rows", "main", "parse_config", "table"]


def parse_config(args: Sequence[str] | None = None) -> EvalMetaWorldConfig:
    """Parse flags; on a bad value print ``eval_metaworld.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(EvalMetaWorldConfig, args, PROG, description=__doc__)


def main(cfg: EvalMetaWorldConfig) -> list[dict[str, Any]]:
    try:
        records, meta = run_eval_metaworld(cfg, command_line("vla_scripts/eval_metaworld.py"))
    except BadInputError as err:  # one line, exit 2
        raise SystemExit(report_bad_input(PROG, err)) from None
    print(table(records))
    write_results(cfg.output_dir, records, meta)
    return records


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-eval-metaworld``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
