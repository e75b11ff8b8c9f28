"""Closed-loop evaluation in the tabletop task: success rate and end-to-end step time per reduction setting.

The policy (default: the bundled trained policy; ``--vla_path`` for another checkpoint on the same task) runs
``--episodes`` episodes of a seed split (``--split``, ``prismatic_tr.envs.splits``: "validation" by default, the
episodes that choose settings and stopping points; "test" for held-out reporting) unreduced and under every setting (``--methods`` x ``--ratios`` at the
projector, plus any ``--settings`` spec: ``vision:attention:0.25@0.3``, ``llm:attention:0.5@0.25``, combinations
joined with ``+``; see ``prismatic_tr.vla.spec``). The same seeds for every setting.

    python vla_scripts/eval_policy.py --episodes 100 --ratios 0.5 0.1
    python vla_scripts/eval_policy.py --methods topk_magnitude --ratios 0.25 --settings vision:attention:0.25@0.3
    python vla_scripts/eval_policy.py --split test --episodes 200 --methods "[]" --output_dir outputs/eval_test
        # the unreduced policy alone on the held-out test split
    python vla_scripts/eval_policy.py --adapter vision-learned-0.1-0.25 --split test --methods "[]" --settings own
        # a shipped adapter under the setting it was trained with (its learned scorer included)

Writes ``results.csv``, ``results.json`` and ``results.png`` (success against speedup) into ``--output_dir``
with the columns method, site, reduction_ratio, depth_fraction, num_patches, llm_visual_tokens, success_rate,
success_ci_low, success_ci_high (Wilson 95 %), episodes, mean_steps, outcome_success / _timeout / _wrong_object
(episodes per outcome), predict_action_ms (median at batch 1) and predict_action_speedup; the split and its
seeds are in the JSON's meta. Bad flags exit with status 2 before the model is loaded.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import sys
from collections.abc import Sequence
from typing import Any

from prismatic_tr.cli import BadInputError, command_line, parse_config_or_exit, report_bad_input, run_command
from prismatic_tr.policy.closed_loop_eval import OWN, EvalPolicyConfig, run_eval_policy

PROG = "eval_policy.py"
__all__ = ["OWN", "EvalPolicyConfig", "cli", "main", "parse_config"]


def parse_config(args: Sequence[str] | None = None) -> EvalPolicyConfig:
    """Parse flags; on a bad value print ``eval_policy.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(EvalPolicyConfig, args, PROG, description=__doc__)


def main(cfg: EvalPolicyConfig) -> list[dict[str, Any]]:
    from prismatic_tr.bench.vla.report import write_csv, write_json
    from prismatic_tr.policy.report import CLOSED_LOOP_COLUMNS, format_rows, plot_tradeoff

    try:
        records, meta, title = run_eval_policy(cfg, command_line("vla_scripts/eval_policy.py"))
    except BadInputError as err:  # one line, exit 2
        raise SystemExit(report_bad_input(PROG, err)) from None
    print(format_rows(records, CLOSED_LOOP_COLUMNS))
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    for path in (write_csv(records, cfg.output_dir / "results.csv"),
                 write_json(records, cfg.output_dir / "results.json", meta),
                 plot_tradeoff(records, cfg.output_dir / "results.png", title)):
        print(f"wrote {path}")
    return records


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-eval-policy``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    sys.exit(cli())
