"""Why ``--freeze`` pays most on reduced towers: six consecutive DINOv2 blocks of ``cpu-bench-oft`` timed eager, compiled
and compiled with inductor's freezing (weights folded and pre-packed once), on the rows an unreduced step gives them
(2 images x 261 tokens) and on the rows a keep-0.1 cut leaves (2 x 31), in one process.

    python benchmarks/frozen_blocks.py                     # bfloat16
    python benchmarks/frozen_blocks.py --dtype float32 --output benchmarks/results/oft_frozen/blocks_float32.json

The blocks' inputs are the hidden states a real backbone call gives them (random weights, a random image), so the
values are those of a step, not random numbers (random inputs through a chain of random blocks can hit slow
denormal paths). Prints one JSON object: ms per block, medians of ``--repeats`` runs of the six blocks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prismatic_tr.bench.vla.frozen_blocks import frozen_blocks
from prismatic_tr.cli import check_int_flag, print_json


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--repeats", type=int, default=9, help="timed runs of each variant and row count")
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    try:
        check_int_flag("repeats", args.repeats, 1)
    except ValueError as err:
        parser.error(str(err))
    result = frozen_blocks(args.dtype, args.repeats, "python benchmarks/frozen_blocks.py --dtype " + args.dtype)
    print_json(result, args.output)
    return result


if __name__ == "__main__":
    main()
