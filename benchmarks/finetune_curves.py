"""Success against fine-tuning steps: the curves of every recorded fine-tuning run under reduction.

Reads the records ``scripts/finetune_reduced.sh`` writes (``benchmarks/results/finetune_reduced/<run>/``:
``eval_val_step_*.json`` per checkpoint on the validation split, ``eval_test*.json`` on the test split) and the
training-free figures of the same settings (``benchmarks/results/selection/eval_val_*.json``, ``eval_test.json``,
step 0 of each curve). Prints one markdown table (validation curve, test rows) and draws ``curves.png``: success
under the setting and of the same weights unreduced, against optimizer steps, one panel per run.

    python benchmarks/finetune_curves.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prismatic_tr.policy.finetune_curves import plot, read_runs, table

RESULTS = Path(__file__).parent / "results"
RUNS = RESULTS / "finetune_reduced"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=RUNS, help="folder of run records")
    args = parser.parse_args()
    runs = read_runs(args.runs)
    if not runs:
        raise SystemExit(f"no run records (eval_val_step_*.json) under {args.runs}")
    print(table(runs, RESULTS))
    plot(runs, args.runs / "curves.png", RESULTS)
    print(f"wrote {args.runs / 'curves.png'}")


if __name__ == "__main__":
    main()
