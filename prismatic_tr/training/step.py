"""One optimizer step over accumulated micro-batches, whatever the policy's forward (OpenVLA's token loss, OFT's
L1 on the chunk)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn


def accumulated_step(
    model: nn.Module, batches: Iterator[dict[str, torch.Tensor]], optimizer: torch.optim.Optimizer,
    grad_accumulation_steps: int, forward: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
) -> dict[str, torch.Tensor]:
    """``grad_accumulation_steps`` micro-batches through ``forward`` (batch -> metrics with a "loss"), one
    optimizer step; the mean metrics (detached). Under DDP, gradients sync on the last micro-batch only."""
    totals: dict[str, torch.Tensor] = {}
    for micro in range(grad_accumulation_steps):
        last = micro == grad_accumulation_steps - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            metrics = forward(next(batches))
            (metrics["loss"] / grad_accumulation_steps).backward()
        for k, v in metrics.items():
            totals[k] = totals.get(k, 0.0) + v.detach().float() / grad_accumulation_steps
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return totals
