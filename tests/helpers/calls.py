"""Run one top-level call of a VLA and read what its reduction kept (prismatic_tr.vla.scope)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from prismatic_tr.vla import reduction_call


def run_and_kept(vla: torch.nn.Module, fn: Callable[[], Any]) -> tuple[Any, torch.Tensor | None]:
    """``fn()`` as one call of ``vla``; returns its result and ``call.kept`` (B, K) (None if nothing was cut)."""
    with reduction_call(vla) as call:
        out = fn()
    return out, call.kept
