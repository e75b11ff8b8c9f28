"""Where should a pooled token sit? The bundled policy under ``spatial_pool`` with each position rule.

A ``spatial_pool`` token averages an s x s window of patches; with original positions it needs one RoPE position.
This runs the bundled tabletop policy closed loop on the validation split (the split for choosing) with every
rule of ``ReducerConfig.pool_position`` ("mean": the mean row-major index of the window's patches; "first": its
top-left patch), and with v0.2's compact numbering, for 2 x 2 and 4 x 4 windows, the same episodes for every row.

    python benchmarks/pool_positions.py --episodes 100

Writes ``benchmarks/results/positions/pool_positions.json`` (or ``--output``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch  # noqa: F401  (torch before tensorflow)

from prismatic_tr.envs.splits import VALIDATION, split_seeds
from prismatic_tr.policy.bundled import UNNORM_KEY, load_bundled_policy
from prismatic_tr.policy.closed_loop import SuccessSummary, run_episodes
from prismatic_tr.reducers.config import POOL_POSITIONS
from prismatic_tr.vla import apply_token_reduction_to_vla, get_token_reduction, remove_token_reduction

OUTPUT = Path(__file__).parent / "results" / "positions" / "pool_positions.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    vla, processor = load_bundled_policy()
    seeds = list(split_seeds(VALIDATION, args.episodes))
    rows = []
    for merge in (2, 4):
        for rule in (*POOL_POSITIONS, "compact"):
            positions = "compact" if rule == "compact" else "original"
            apply_token_reduction_to_vla(vla, "spatial_pool", spatial_merge_size=merge, positions=positions)
            if rule != "compact":
                get_token_reduction(vla).reducer.cfg.pool_position = rule
            start = time.perf_counter()
            try:
                summary = SuccessSummary.of(run_episodes(vla, processor, seeds, UNNORM_KEY, batch_size=25))
            finally:
                remove_token_reduction(vla)
            rows.append({"window": f"{merge}x{merge}", "position": rule, "episodes": summary.episodes,
                         "success_rate": summary.success_rate, "success_ci_low": summary.success_ci_low,
                         "success_ci_high": summary.success_ci_high, "mean_steps": summary.mean_steps,
                         "wall_s": round(time.perf_counter() - start, 1)})
            print(rows[-1], flush=True)
    base = SuccessSummary.of(run_episodes(vla, processor, seeds, UNNORM_KEY, batch_size=25))
    record = {"command": f"python benchmarks/pool_positions.py --episodes {args.episodes}",
              "split": VALIDATION, "seeds": [seeds[0], seeds[-1]], "unreduced_success": base.success_rate,
              "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n")
    print(f"unreduced {base.success_rate:.0%}; wrote {args.output}")


if __name__ == "__main__":
    main()
