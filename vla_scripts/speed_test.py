"""Speed test of a timm ViT with or without in-backbone token reduction; prints one CSV row.

    python vla_scripts/speed_test.py --model topk_deit_base_patch16_224 --input-size 448 --batch-size 8 \\
        --keep_ratio 0.1 --reduction_loc 3 6 9 --device cpu
    run_name,tp,latency_ms,time_total,flops,max_memory,no_params,no_params_trainable,power
    topk_deit_base_patch16_224_448px_bs8_...,12.3,81.2,...

Units: tp images/s, latency_ms ms per image, time_total s, flops GMACs per image, max_memory MB,
no_params(_trainable) millions, power mean W (GPU only, empty on a CPU). Flags accept both ``-`` and ``_``
spellings (``--input-size`` = ``--input_size``). Bad flags exit with status 2 and a message.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch  # noqa: F401  (torch before anything that may pull in tensorflow)

from prismatic_tr.bench.measure.devices import DTYPES
from prismatic_tr.bench.vit.speed import (
    SpeedConfig,
    append_csv,
    check_csv,
    format_csv,
    profile_line,
    run_speed_test,
)
from prismatic_tr.cli import add_flag, parse_args, set_threads


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="speed_test.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flag(p, "model", default="deit_base_patch16_224", help="timm name, optionally with a method prefix (topk_, tome_, hquota_ff_)")
    add_flag(p, "input-size", type=int, default=224, help="square input side in pixels")
    add_flag(p, "batch-size", type=int, default=1)
    add_flag(p, "keep_ratio", type=float, default=None, help="fraction of patch tokens kept per location")
    add_flag(p, "reduction_loc", type=int, nargs="+", default=None, help="0-based block indices, e.g. 3 6 9")
    add_flag(p, "r", type=int, default=None, help="tokens merged per block (tome / hquota_ff)")
    add_flag(p, "warmup_iters", type=int, default=5)
    add_flag(p, "test_iters", type=int, default=20, help="timed calls per measurement")
    add_flag(p, "test_multiple", type=int, default=3, help="measurements; tp is their median")
    add_flag(p, "dummy_loader", action="store_true", help="copy a fresh host batch in every step")
    add_flag(p, "device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_flag(p, "dtype", default="float32", choices=sorted(DTYPES))
    add_flag(p, "compile", action="store_true", help="torch.compile the model")
    add_flag(p, "fullgraph", action="store_true", help="with --compile: error on any graph break")
    add_flag(p, "cuda_graph", action="store_true", help="capture the forward in a CUDA graph (GPU only)")
    add_flag(p, "run_name", default=None)
    add_flag(p, "seed", type=int, default=0)
    add_flag(p, "threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    add_flag(p, "csv", type=Path, default=None, help="also append the row to this CSV (header written if new)")
    add_flag(p, "no_header", action="store_true", help="print only the row")
    add_flag(p, "profile", action="store_true",
             help="also print (stderr) torch.profiler ops, kernel launches and device vs wall ms per forward")
    return p


def config_from_args(args: argparse.Namespace) -> SpeedConfig:
    """SpeedConfig from parsed flags (raises ValueError for bad values)."""
    return SpeedConfig(
        model=args.model, input_size=args.input_size, batch_size=args.batch_size, keep_ratio=args.keep_ratio,
        reduction_loc=args.reduction_loc, r=args.r, warmup_iters=args.warmup_iters, test_iters=args.test_iters,
        test_multiple=args.test_multiple, dummy_loader=args.dummy_loader, device=args.device, dtype=args.dtype,
        compile=args.compile, fullgraph=args.fullgraph, cuda_graph=args.cuda_graph, run_name=args.run_name,
        seed=args.seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    set_threads(parser, args.threads)
    try:
        cfg = config_from_args(args)
        cfg.check_model()  # meta parameters: a bad name or reduction setting fails before a real build
        if args.csv is not None:
            check_csv(args.csv)  # a file of other columns fails before any timing
        row = run_speed_test(cfg)
    except ValueError as err:
        parser.error(str(err))  # exits with status 2
    line = format_csv(row)
    print(line if args.no_header else format_csv(row, header=True))
    if args.csv is not None:
        append_csv(args.csv, line)
    if args.profile:
        print(profile_line(cfg), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
