"""Inductor's freezing on reduced towers (``benchmarks/frozen_blocks.py``): six consecutive DINOv2 blocks of
``cpu-bench-oft`` timed eager, compiled and compiled with freezing, on the rows an unreduced step gives them and on
the rows a keep-0.1 cut leaves, their inputs the hidden states a real backbone call gives them.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from prismatic_tr.bench.measure.devices import timing_meta
from prismatic_tr.bench.vla.compiled import compile_blocks
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


def frozen_blocks(dtype: str, repeats: int, command: str) -> dict[str, Any]:
    """The record: ms per block (medians of ``repeats`` runs of the six blocks) eager, compiled and frozen, on the
    full and the reduced rows, in ``dtype`` ("bfloat16" or "float32"); ``command`` kept in it."""
    vla = build_vla("cpu-bench-oft", dtype=getattr(torch, dtype))
    inputs = block_inputs(vla)
    blocks = list(vla.vision_backbone.featurizer.blocks[FIRST:FIRST + COUNT])
    result: dict[str, Any] = {**timing_meta(command, dtype),
                              "blocks": f"cpu-bench-oft featurizer (DINOv2-L) blocks {FIRST}-{FIRST + COUNT - 1}",
                              "rows": {k: list(v.shape) for k, v in inputs.items()}, "ms_per_block": {}}
    with torch.no_grad():
        for variant in ("eager", "compiled", "frozen"):
            handle = compile_blocks(vla, freeze=variant == "frozen") if variant != "eager" else None
            try:
                result["ms_per_block"][variant] = {k: round(per_block_ms(blocks, x, repeats), 2)
                                                   for k, x in inputs.items()}
            finally:
                if handle is not None:
                    handle.remove()
                    torch._dynamo.reset()
    return result
