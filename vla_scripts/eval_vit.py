"""Fidelity of in-backbone token reduction on a timm ViT: sweep methods x keep rates, plot against GMACs.

    python vla_scripts/eval_vit.py                                   # DeiT-S, random weights, generated images
    python vla_scripts/eval_vit.py --model vit_small_patch14_reg4_dinov2 --keep_ratios 0.7 0.5
    python vla_scripts/eval_vit.py --data_dir /data/imagenet/val --pretrained true --num_images 2000

Every method reduces at ``--reduction_loc`` (default EViT's [3, 6, 9] scaled to the depth) keeping
``keep_ratio`` of the patch tokens per location (tome / hquota_ff merge the rest, at most half per block);
``--tome_r`` adds ToMe's own constant-r settings. Writes ``results.csv``, ``results.json`` and
``results.png`` (agreement and KL against GMACs per image) to ``--output_dir``. Without ``--data_dir``
the images are uniform noise from ``--seed`` (no labels, so no accuracy).

Timing (``batch_ms``): after ``--warmup`` untimed forwards of one batch per setting, ``--timing_runs``
timed forwards per setting, all settings interleaved (baseline included); the median, p10 and p90 are
reported, and ``speedup`` = baseline median / setting median. The fidelity pass is not timed.
List flags take ``--keep_ratios 0.7 0.5``, ``--keep_ratios 0.7,0.5`` or ``--keep_ratios "[0.7,0.5]"``.
Bad flags exit with status 2 before any model is built.
"""

from collections.abc import Sequence
from typing import Any

from prismatic_tr.bench.vit.fidelity_sweep import EvalVitConfig, format_table, run_sweep, write_outputs
from prismatic_tr.cli import parse_config_or_exit, run_command


def parse_config(args: Sequence[str] | None = None) -> EvalVitConfig:
    """Parse flags; on a bad value print ``eval_vit.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(EvalVitConfig, args, "eval_vit.py", description=__doc__)


def main(cfg: EvalVitConfig) -> list[dict[str, Any]]:
    rows, meta = run_sweep(cfg)
    if meta["random_weights"]:
        print("NOTE: random weights (no --pretrained): fidelity numbers only show that the machinery works.")
    print(format_table(rows, cfg))
    for path in write_outputs(rows, meta, cfg.output_dir):
        print(f"wrote {path}")
    return rows


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-eval-vit``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
