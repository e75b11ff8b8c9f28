"""Time the exact savings on one control step: OpenVLA's towers as they run in OpenVLA (every block, the last
one's output thrown away) against stopping after the block OpenVLA keeps (prismatic_tr.vla.exact), interleaved
in one run, and check that the actions are bit-identical.

    python benchmarks/exact_savings.py                        # cpu-bench preset, random weights, bf16
    python benchmarks/exact_savings.py --vla_path prismatic_tr/assets/tabletop_policy --dtype float32

Prints one JSON object (medians in ms) and writes it to ``--output`` when given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prismatic_tr.cli import print_json


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu-bench", help="random-weight preset when no --vla_path")
    parser.add_argument("--vla_path", default=None, help="checkpoint directory instead of a preset")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--repeats", type=int, default=10, help="timed runs of each variant (interleaved)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error(f"--repeats {args.repeats} / --warmup {args.warmup}: use repeats >= 1, warmup >= 0")
    from prismatic_tr.bench.vla.exact import exact_savings_record

    try:
        result = exact_savings_record(args.vla_path, args.preset, args.dtype, args.repeats, args.warmup)
    except ValueError as err:
        parser.error(str(err))
    command = " ".join(["python", "benchmarks/exact_savings.py", *(argv if argv is not None else sys.argv[1:])])
    wall_s = result.pop("wall_s")
    result = {**result, "command": command, "wall_s": wall_s}  # the keys in the order they had
    print_json(result, args.output)
    return result


if __name__ == "__main__":
    main()
