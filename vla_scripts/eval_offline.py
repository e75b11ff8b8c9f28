"""Offline evaluation on recorded episodes: what each reduction setting does to a checkpoint's actions on an RLDS
dataset (OpenVLA's layout: steps with an image, a language instruction and a 7-D action), on your own data.

    python vla_scripts/eval_offline.py --data_root_dir datasets --dataset_name bridge_orig --max_samples 256
    python vla_scripts/eval_offline.py --vla_path /path/to/openvla-7b --data_root_dir D --dataset_name N \\
        --methods topk_magnitude --ratios 0.5 0.25 --settings vision:attention:0.5@0.3

Default model: the bundled tabletop policy. Per setting (the unreduced baseline first) over the first
``--max_samples`` steps of ``--split``: method, reduction_ratio, num_patches, action_l1_to_demo,
action_l1_to_unreduced and token_agreement, in ``results.csv`` / ``results.json`` and a plot (``results.png``)
in ``--output_dir``. Images of any size are resized by the model's processor. A missing dataset or split, a
dataset without the needed keys, or a model without action statistics for ``--unnorm_key`` (default: the
dataset name) is an error in one line (exit 2) before anything is evaluated.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import sys
from collections.abc import Sequence
from typing import Any

from prismatic_tr.cli import BadInputError, command_line, parse_config_or_exit, report_bad_input, run_command
from prismatic_tr.policy.offline_eval import (
    OFFLINE_COLUMNS,
    EvalOfflineConfig,
    run_eval_offline,
)

PROG = "eval_offline.py"


def parse_config(args: Sequence[str] | None = None) -> EvalOfflineConfig:
    """Parse flags; on a bad value print ``eval_offline.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(EvalOfflineConfig, args, PROG, description=__doc__)


def main(cfg: EvalOfflineConfig) -> list[dict[str, Any]]:
    from prismatic_tr.bench.vla.report import write_csv, write_json
    from prismatic_tr.policy.report import format_rows, plot_tradeoff

    try:
        records, meta, title = run_eval_offline(cfg, command_line("vla_scripts/eval_offline.py"))
    except BadInputError as err:  # one line, exit 2, before anything is evaluated
        raise SystemExit(report_bad_input(PROG, err)) from None
    print(format_rows(records, OFFLINE_COLUMNS))
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    for path in (write_csv(records, cfg.output_dir / "results.csv"),
                 write_json(records, cfg.output_dir / "results.json", meta),
                 plot_tradeoff(records, cfg.output_dir / "results.png", title, x="tokens_kept", y="token_agreement")):
        print(f"wrote {path}")
    return records


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-eval-offline``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    sys.exit(cli())
