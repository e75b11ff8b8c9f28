"""Sweep baseline vs token-reduced ViT over input sizes x batch sizes; CSV, markdown tables and a plot.

    python vla_scripts/sweep.py --model topk_deit_base_patch16_224 --keep_ratio 0.1 --reduction_loc 3 6 9 \\
        --input_sizes 224 448 --batch_sizes 1 2 4 8 16 --device cpu --out_dir benchmarks/results/vit/sweep_cpu

Writes ``sweep.csv`` (appended row by row; rerunning the same command resumes), ``sweep.md`` (one
``Batch Size | Baseline TP | TR TP | Speedup | Better?`` table per input size, with what the reduction adds
per location) and ``speedup.png`` (speedup against token count, break-even marked). Bad flags exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from prismatic_tr.bench.measure.devices import DTYPES, cpu_feature_words, cpu_info, timing_meta
from prismatic_tr.bench.vit.sweep import SweepConfig, markdown_tables, plot_speedup, run_sweep
from prismatic_tr.cli import add_flag, command_line, parse_args, set_threads


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sweep.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flag(p, "model", default="topk_deit_base_patch16_224", help="timm name with a method prefix")
    add_flag(p, "keep_ratio", type=float, default=None, help="default 0.1 unless --r is given")
    add_flag(p, "reduction_loc", type=int, nargs="+", default=None, help="default 3 6 9 with --keep_ratio")
    add_flag(p, "r", type=int, default=None)
    add_flag(p, "input_sizes", type=int, nargs="+", default=[224, 448])
    add_flag(p, "batch_sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    add_flag(p, "warmup", type=int, default=3)
    add_flag(p, "repeats", type=int, default=10, help="timed calls per model and cell (interleaved)")
    add_flag(p, "device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_flag(p, "dtype", default="float32", choices=sorted(DTYPES))
    add_flag(p, "compile", action="store_true")
    add_flag(p, "cuda_graph", action="store_true")
    add_flag(p, "profile", action="store_true", help="add torch.profiler columns (ops, launches, device vs wall ms)")
    add_flag(p, "threads", type=int, default=None)
    add_flag(p, "out_dir", type=Path, default=None, help="default benchmarks/results/vit/sweep_<model>_<device>")
    add_flag(p, "no_progress", action="store_true")
    return p


def config_from_args(args: argparse.Namespace) -> SweepConfig:
    keep_ratio, loc = args.keep_ratio, args.reduction_loc
    if args.r is None and keep_ratio is None:
        keep_ratio = 0.1
    if keep_ratio is not None and loc is None:
        loc = [3, 6, 9]
    return SweepConfig(model=args.model, keep_ratio=keep_ratio, reduction_loc=loc, r=args.r,
                       input_sizes=args.input_sizes, batch_sizes=args.batch_sizes, warmup=args.warmup,
                       repeats=args.repeats, device=args.device, dtype=args.dtype, compile=args.compile,
                       cuda_graph=args.cuda_graph, profile=args.profile)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    set_threads(parser, args.threads)
    try:
        cfg = config_from_args(args)
        cfg.check_models()  # meta parameters: a bad name or reduction setting fails before a real build
        out = args.out_dir or Path("benchmarks/results/vit") / f"sweep_{cfg.model}_{cfg.device}_{cfg.mode}"
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out_dir {str(out)!r} is a file; give a directory")
        rows = run_sweep(cfg, csv_path=out / "sweep.csv", progress=not args.no_progress)
    except ValueError as err:
        parser.error(str(err))
    table = markdown_tables(rows)
    meta = timing_meta(command_line("vla_scripts/sweep.py", argv), cfg.dtype, cfg.device)
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    (out / "sweep.md").write_text(f"# {cfg.model} on {cfg.device} ({cfg.dtype}, {cfg.mode})\n\n"
                                  f"`{meta['command']}` on {cpu_info()['model']} ({cpu_feature_words()}); "
                                  f"the machine in meta.json\n\n{table}")
    plot_speedup(rows, out / "speedup.png", title=f"{cfg.model}, {cfg.device}, {cfg.mode}")
    print(table)
    print(f"wrote {out / 'sweep.csv'}, {out / 'sweep.md'}, {out / 'meta.json'}, {out / 'speedup.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
