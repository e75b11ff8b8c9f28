"""benchmarks/metaworld_camera_budget.py (issue 48's experiment): with equal budgets its per-camera cover is the
`diverse` projector reduction itself; unequal budgets keep each camera's own count, at the right positions; the
patched class is put back."""

from __future__ import annotations

import torch
from helpers.benchmark_scripts import load_benchmark

from prismatic_tr.models import build_oft_vla
from prismatic_tr.vla import apply_token_reduction_spec, remove_token_reduction
from prismatic_tr.vla.layout import PerImageReducer
from prismatic_tr.vla.scope import reduction_call


def observe(vla: torch.nn.Module, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad(), reduction_call(vla) as call:
        return vla.embed_observation(pixels, torch.zeros(1, 8)), call.kept


def test_budgets_per_camera() -> None:
    script = load_benchmark("metaworld_camera_budget")
    vla = build_oft_vla("tiny", oft={"num_images_in_input": 2, "proprio_dim": 8}, seed=0).eval()
    pixels = torch.randn(1, 12, 224, 224, generator=torch.Generator().manual_seed(0))
    original = PerImageReducer.reduce
    apply_token_reduction_spec(vla, "diverse:0.25")
    try:
        own = observe(vla, pixels)
        with script.camera_budgets([0.25, 0.25]):
            same = observe(vla, pixels)
        with script.camera_budgets([0.1, 0.4]):
            tokens, kept = observe(vla, pixels)
    finally:
        remove_token_reduction(vla)
    assert torch.equal(own[0], same[0]) and torch.equal(own[1], same[1])
    assert tokens.shape[1] == 26 + 102 + 1 and kept.shape[1] == 128  # + the proprio token
    assert (kept[0, :26] < 256).all() and (kept[0, 26:] >= 256).all()
    assert PerImageReducer.reduce is original
