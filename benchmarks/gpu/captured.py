"""OpenVLA-7B and OpenVLA-OFT-7B sizes on a CUDA GPU (RANDOM weights, bfloat16): eager against CUDA-graph
``predict_action`` for every setting at batch 1 and 8, interleaved, beside each model's roofline on that GPU.

    python benchmarks/gpu/captured.py --output_dir benchmarks/results/gpu_captured     # ~5 min on an H100
    python benchmarks/gpu/captured.py --presets tiny-oft tiny --batch_sizes 1 --num_runs 3

Writes ``<output_dir>/<preset>_b<batch>.json`` (rows, the GPU's measured and datasheet peaks, versions, command) and
prints one table per preset and batch (method: ``prismatic_tr.bench.vla.captured``). Needs one GPU with ~40 GB free;
on a machine without CUDA it exits 2 before any work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prismatic_tr.bench.vla.captured_job import GPU_SETTINGS, CapturedJob, check_cuda, run_captured_job
from prismatic_tr.cli import EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["openvla-oft-7b", "openvla-7b"])
    parser.add_argument("--batch_sizes", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--settings", nargs="*", default=list(GPU_SETTINGS), help="specs beside the unreduced row")
    parser.add_argument("--num_runs", type=int, default=20, help="timed rounds (every setting once per round)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    parser.add_argument("--output_dir", type=Path, default=Path("benchmarks/results/gpu_captured"))
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    try:
        job = CapturedJob(tuple(args.presets), tuple(args.batch_sizes), tuple(args.settings), args.num_runs,
                          args.warmup, args.output_dir)
        check_cuda(args.device)
    except ValueError as err:
        print(f"captured.py: error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    written, failed = run_captured_job(job, args.device)
    if failed:
        raise SystemExit(1)
    return written


if __name__ == "__main__":
    main()
