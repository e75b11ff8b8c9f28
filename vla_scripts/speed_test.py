"""Speed test of a timm ViT with or without in-backbone token reduction; prints one CSV row.

    python vla_scripts/speed_test.py --model topk_deit_base_patch16_224 --input-size 448 --batch-size 8 \\
        --keep_rate 0.1 --reduction_loc 3 6 9 --device cpu
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
from prismatic_tr.bench.vit.speed import CSV_HEADER, SpeedConfig, format_csv, run_speed_test
from prismatic_tr.cli import add_flag, parse_args, set_threads


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="speed_test.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flag(p, "model", default="deit_base_patch16_224", help="timm name, optionally with a method prefix (topk_, tome_, hquota_ff_)")
    add_flag(p, "input-size", type=int, default=224, help="square input side in pixels")
    add_flag(p, "batch-size", type=int, default=1)
    add_flag(p, "keep_rate", type=float, default=None, help="fraction of patch tokens kept per location")
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
        model=args.model, input_size=args.input_size, batch_size=args.batch_size, keep_rate=args.keep_rate,
        reduction_loc=args.reduction_loc, r=args.r, warmup_iters=args.warmup_iters, test_iters=args.test_iters,
        test_multiple=args.test_multiple, dummy_loader=args.dummy_loader, device=args.device, dtype=args.dtype,
        compile=args.compile, fullgraph=args.fullgraph, cuda_graph=args.cuda_graph, run_name=args.run_name,
        seed=args.seed,
    )


def append_csv(path: Path, line: str) -> None:
    """Append one row to ``path``, writing the header first when the file is new or empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a") as f:
        if new:
            f.write(",".join(CSV_HEADER) + "\n")
        f.write(line + "\n")


def profile_line(cfg: SpeedConfig) -> str:
    """One line of per-forward profiler figures for ``cfg`` (built again; plain eager forward)."""
    from prismatic_tr.bench.measure.profiling import profile_forward
    from prismatic_tr.bench.vit.speed import build_model, make_input

    model, x = build_model(cfg), make_input(cfg)
    prof = profile_forward(lambda: model(x), device=cfg.device, repeats=2)
    launches = "n/a (CPU)" if prof.kernel_launches is None else f"{prof.kernel_launches:.0f}"
    return (f"profile {cfg.name()}: dispatched_ops={prof.dispatched_ops:.0f} kernel_launches={launches} "
            f"device_ms={prof.device_time_ms:.2f} wall_ms={prof.wall_time_ms:.2f} "
            f"device/wall={prof.device_fraction:.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    set_threads(parser, args.threads)
    try:
        cfg = config_from_args(args)
        cfg.check_model()  # meta parameters: a bad name or reduction setting fails before a real build
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
