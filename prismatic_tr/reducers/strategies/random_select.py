"""``random``: keep K tokens chosen uniformly at random (a baseline every method should beat)."""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig
from prismatic_tr.reducers.random_stream import KeyStream, uniform_scores
from prismatic_tr.reducers.strategies.selection import register_selection


@register_selection("random", uses_key=True)
def score_random(
    patches: torch.Tensor, cfg: ReducerConfig, key: torch.Tensor | torch.Generator | None = None
) -> torch.Tensor:
    """(B, N, D) -> (B, N) distinct pseudo-random int64 scores: their top K is a uniform random K-subset per row.

    ``key``: 0-d int64 tensor from :class:`~prismatic_tr.reducers.random_stream.KeyStream` (a fresh one per
    call; :class:`~prismatic_tr.reducers.TokenReducer` passes it); None draws from ``cfg.seed`` alone.
    Eager: ~12 small integer ops (one fused kernel under ``torch.compile``).
    """
    if not isinstance(key, torch.Tensor):
        key = KeyStream(cfg.seed).next_key()
    b, n = patches.shape[:2]
    return uniform_scores(b, n, key, patches.device)
