"""Where a 7B-size step's GPU time goes (RANDOM weights, bfloat16): its kernels under torch.profiler by phase and
by kind, unreduced and under each setting (method: ``prismatic_tr.bench.vla.kernel_profile``).

    python benchmarks/gpu/kernel_profile.py --preset openvla-oft-7b --settings vision:diverse:0.1@0.05
    python benchmarks/gpu/kernel_profile.py --preset tiny-oft --device cpu     # the machinery, no kernels

Prints one JSON object (per setting: kernel_ms, kernels, by_kind_ms, phase_span_ms, top kernels) and writes it to
``--output`` when given. ``--recount FILE`` rewrites a file written before the phase ranges were left out of the
kernel counts (``prismatic_tr.bench.vla.kernel_profile.recount``) instead of profiling.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

from prismatic_tr.bench.measure.devices import timing_meta
from prismatic_tr.bench.vla.job import model_input_sizes, sample_inputs
from prismatic_tr.bench.vla.kernel_profile import kernel_profile, recount
from prismatic_tr.cli import EXIT_BAD_INPUT, check_int_flag, print_json
from prismatic_tr.models import build_processor, build_vla


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="openvla-oft-7b")
    parser.add_argument("--batch_size", type=int, default=1)
    parser.add_argument("--settings", nargs="*", default=["diverse:0.1", "vision:diverse:0.1@0.05"])
    parser.add_argument("--steps", type=int, default=3, help="profiled steps per setting")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--recount", type=Path, default=None, help="a file of an earlier run to recount")
    args = parser.parse_args(argv)
    if args.recount is not None:
        try:
            data = json.loads(args.recount.read_text())
            result = {**data, "rows": [recount(r) for r in data["rows"]],
                      "recounted": f"python benchmarks/gpu/kernel_profile.py --recount {args.recount}"}
        except (OSError, ValueError, KeyError) as err:
            print(f"kernel_profile.py: error: --recount {args.recount}: {err!r}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        print_json(result, args.output)
        return result
    try:
        check_int_flag("steps", args.steps, 1)
        check_int_flag("batch_size", args.batch_size, 1)
        vla = build_vla(args.preset, dtype=torch.bfloat16, device=args.device).eval()
    except (ValueError, RuntimeError) as err:
        print(f"kernel_profile.py: error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    images, proprio = model_input_sizes(vla)
    inputs = sample_inputs(build_processor(vla.config), "pick up the red block", args.batch_size, 224, 0, images,
                           proprio)
    result = {**timing_meta(" ".join(["python benchmarks/gpu/kernel_profile.py", *sys.argv[1:]]), torch.bfloat16,
                            args.device),
              "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
              "preset": args.preset, "batch_size": args.batch_size, "random_weights": True,
              "rows": kernel_profile(vla, inputs, args.settings, args.steps)}
    print_json(result, args.output)
    return result


if __name__ == "__main__":
    main()
