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
from pathlib import Path

import torch  # noqa: F401  (torch before tensorflow)

from prismatic_tr.bench.vla.pool_positions import pool_positions

OUTPUT = Path(__file__).parent / "results" / "positions" / "pool_positions.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    record = pool_positions(args.episodes, f"python benchmarks/pool_positions.py --episodes {args.episodes}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n")
    print(f"unreduced {record['unreduced_success']:.0%}; wrote {args.output}")


if __name__ == "__main__":
    main()
