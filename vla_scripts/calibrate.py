"""Measure where token reduction pays on this device and save it as a calibration profile (JSON).

    python vla_scripts/calibrate.py --device cuda                       # -> ~/.cache/prismatic_tr/calibration_cuda.json
    python vla_scripts/calibrate.py --model topk_deit_base_patch16_224 --input_sizes 224 320 448 \\
        --batch_sizes 1 8 --out calib.json

``prismatic_tr.bench.vit.breakeven.should_use_token_reduction`` reads the profile. The sweep CSV is kept next
to the profile (``<out>.sweep.csv``), so an interrupted calibration resumes. Bad flags exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from prismatic_tr.bench.measure.devices import DTYPES, device_type, timing_meta
from prismatic_tr.bench.vit.breakeven import default_profile_path, write_profile
from prismatic_tr.bench.vit.sweep import SweepConfig, markdown_tables, run_sweep
from prismatic_tr.cli import add_flag, command_line, parse_args, set_threads


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="calibrate.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flag(p, "model", default="topk_deit_base_patch16_224", help="timm name with a method prefix")
    add_flag(p, "keep_ratio", type=float, default=0.1)
    add_flag(p, "reduction_loc", type=int, nargs="+", default=[3, 6, 9])
    add_flag(p, "input_sizes", type=int, nargs="+", default=[224, 320, 448])
    add_flag(p, "batch_sizes", type=int, nargs="+", default=[1, 8])
    add_flag(p, "warmup", type=int, default=3)
    add_flag(p, "repeats", type=int, default=10)
    add_flag(p, "device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_flag(p, "dtype", default="float32", choices=sorted(DTYPES))
    add_flag(p, "compile", action="store_true")
    add_flag(p, "cuda_graph", action="store_true")
    add_flag(p, "threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    add_flag(p, "out", type=Path, default=None, help="profile path (default ~/.cache/prismatic_tr/calibration_<device>.json)")
    add_flag(p, "no_progress", action="store_true")
    return p


def _device_name(device: str) -> str:
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(dev)
    import platform

    return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    set_threads(parser, args.threads)
    try:
        cfg = SweepConfig(model=args.model, keep_ratio=args.keep_ratio, reduction_loc=args.reduction_loc,
                          input_sizes=args.input_sizes, batch_sizes=args.batch_sizes, warmup=args.warmup,
                          repeats=args.repeats, device=args.device, dtype=args.dtype, compile=args.compile,
                          cuda_graph=args.cuda_graph)
        cfg.check_models()  # meta parameters: a bad name or reduction setting fails before a real build
        out = args.out or default_profile_path(device_type(cfg.device))
        if out.is_dir():
            raise ValueError(f"--out {str(out)!r} is a directory; give the profile's file path")
        rows = run_sweep(cfg, csv_path=out.with_name(out.name + ".sweep.csv"), progress=not args.no_progress)
        write_profile(rows, out, device_name=_device_name(cfg.device),
                      extra={"keep_ratio": cfg.keep_ratio, "reduction_loc": cfg.reduction_loc,
                             **timing_meta(command_line("vla_scripts/calibrate.py", argv), cfg.dtype, cfg.device)})
    except ValueError as err:
        parser.error(str(err))
    print(markdown_tables(rows))
    print(f"wrote calibration profile {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
