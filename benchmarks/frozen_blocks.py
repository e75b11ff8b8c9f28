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
import time
from pathlib import Path

import torch

from prismatic_tr.bench.measure.devices import cpu_info
from prismatic_tr.bench.vla.compiled import compile_blocks
from prismatic_tr.cli import print_json
from prismatic_tr.models.build import build_vla
from prismatic_tr.vla.api import apply_token_reduction_spec, remove_token_reduction

FIRST, COUNT = 8, 6  # featurizer blocks 8-13: past a 1/4 cut (after block 5), so a reduced step runs them on 2 x 31 rows


def block_inputs(vla: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{"full": (2, 261, C), "reduced": (2, 31, C)}``: what block FIRST receives in a step, unreduced and at
    ``vision:diverse:0.1@0.25``."""
    tower = vla.vision_backbone.featurizer
    seen: dict[str, torch.Tensor] = {}
    pixels = torch.rand(1, 12, 224, 224, generator=torch.Generator().manual_seed(0)) * 2 - 1
    for name, spec in (("full", "none"), ("reduced", "vision:diverse:0.1@0.25")):
        apply_token_reduction_spec(vla, spec)
        hook = tower.blocks[FIRST].register_forward_pre_hook(lambda m, args, n=name: seen.setdefault(n, args[0]))
        try:
            with torch.no_grad():
                vla.vision_backbone(pixels)
        finally:
            hook.remove()
            remove_token_reduction(vla)
    return seen


def per_block_ms(blocks: list[torch.nn.Module], x: torch.Tensor, repeats: int) -> float:
    """Median ms per block of running ``blocks`` one after another on ``x`` (two untimed runs first)."""
    def run() -> None:
        y = x
        for block in blocks:
            y = block(y)

    for _ in range(2):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2] * 1e3 / len(blocks)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--repeats", type=int, default=9, help="timed runs of each variant and row count")
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats} is not allowed; use an integer >= 1")
    dtype = getattr(torch, args.dtype)
    vla = build_vla("cpu-bench-oft", dtype=dtype)
    inputs = block_inputs(vla)
    blocks = list(vla.vision_backbone.featurizer.blocks[FIRST:FIRST + COUNT])
    result: dict = {"command": "python benchmarks/frozen_blocks.py --dtype " + args.dtype, "dtype": args.dtype,
                    "cpu": cpu_info(),
                    "threads": torch.get_num_threads(), "torch": torch.__version__,
                    "blocks": f"cpu-bench-oft featurizer (DINOv2-L) blocks {FIRST}-{FIRST + COUNT - 1}",
                    "rows": {k: list(v.shape) for k, v in inputs.items()}, "ms_per_block": {}}
    with torch.no_grad():
        for variant in ("eager", "compiled", "frozen"):
            handle = compile_blocks(vla, freeze=variant == "frozen") if variant != "eager" else None
            try:
                result["ms_per_block"][variant] = {k: round(per_block_ms(blocks, x, args.repeats), 2)
                                                   for k, x in inputs.items()}
            finally:
                if handle is not None:
                    handle.remove()
                    torch._dynamo.reset()
    print_json(result, args.output)
    return result


if __name__ == "__main__":
    main()
