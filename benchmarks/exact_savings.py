"""Time the exact savings on one control step: OpenVLA's towers as they run in OpenVLA (every block, the last
one's output thrown away) against stopping after the block OpenVLA keeps (prismatic_tr.vla.exact), interleaved
in one run, and check that the actions are bit-identical.

    python benchmarks/exact_savings.py                        # cpu-bench preset, random weights, bf16
    python benchmarks/exact_savings.py --vla_path prismatic_tr/assets/tabletop_policy --dtype float32

Prints one JSON object (medians in ms) and writes it to ``--output`` when given.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

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

    from prismatic_tr.bench.vla.exact import measure_exact_savings
    from prismatic_tr.bench.vla.job import sample_inputs
    from prismatic_tr.models import PRESETS, build_processor, build_vla, load_vla

    dtype = getattr(torch, args.dtype)
    if args.vla_path is not None:
        if not (Path(args.vla_path) / "config.json").is_file():
            parser.error(f"--vla_path {args.vla_path!r} is not a checkpoint directory (no config.json)")
        vla, processor = load_vla(args.vla_path, dtype=dtype)
        source = args.vla_path
    else:
        if args.preset not in PRESETS:
            parser.error(f"--preset {args.preset!r} is not allowed; choose one of {sorted(PRESETS)}")
        vla = build_vla(args.preset, seed=0).to(dtype).eval()
        processor, source = build_processor(vla.config), f"preset {args.preset} (random weights)"
    inputs = sample_inputs(processor, "pick up the red block", 1, int(vla.config.image_sizes[0]), seed=0)
    inputs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
    unnorm_key = next(iter(vla.norm_stats))
    start = time.perf_counter()
    result = measure_exact_savings(vla, inputs, unnorm_key, repeats=args.repeats, warmup=args.warmup)
    result = {"model": source, "dtype": args.dtype, "repeats": args.repeats, "warmup": args.warmup,
              **{k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()},
              "torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.machine(),
              "command": " ".join(["python", "benchmarks/exact_savings.py", *(argv if argv is not None else sys.argv[1:])]),
              "wall_s": round(time.perf_counter() - start, 1)}
    print_json(result, args.output)
    return result


if __name__ == "__main__":
    main()
