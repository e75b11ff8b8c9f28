"""What the exact savings save: ``predict_action`` with the towers running every block (OpenVLA as is) against
stopping after the block OpenVLA keeps (:mod:`prismatic_tr.vla.exact`), interleaved, and whether the actions
are bit-identical."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.bench.measure.timing import interleaved
from prismatic_tr.vla.exact import apply_exact_savings, run_last_block


@torch.no_grad()
def measure_exact_savings(vla: nn.Module, inputs: dict[str, torch.Tensor], unnorm_key: str, repeats: int = 5,
                          warmup: int = 1) -> dict[str, Any]:
    """``{"all_blocks_ms", "stop_early_ms", "saved_ms", "speedup", "identical_actions"}`` (medians)."""
    def predict() -> np.ndarray:
        return np.asarray(vla.predict_action(**inputs, unnorm_key=unnorm_key, do_sample=False))

    contexts = {"all_blocks": lambda: run_last_block(vla), "stop_early": lambda: apply_exact_savings(vla)}
    with run_last_block(vla):
        full = predict()
    with apply_exact_savings(vla):
        early = predict()
    stats = interleaved({"all_blocks": predict, "stop_early": predict}, warmup=warmup, repeats=repeats,
                        contexts=contexts)
    a, b = stats["all_blocks"].median_ms, stats["stop_early"].median_ms
    return {"all_blocks_ms": a, "stop_early_ms": b, "saved_ms": a - b, "speedup": a / b,
            "identical_actions": bool(np.array_equal(full, early))}
