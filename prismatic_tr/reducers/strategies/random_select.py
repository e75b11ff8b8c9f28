"""``random``: keep K tokens chosen uniformly at random (a baseline every method should beat)."""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput
from prismatic_tr.reducers.registry import register_strategy
from prismatic_tr.reducers.strategies.selection import count_by_ratio, keep_top_scores


@register_strategy("random", count=count_by_ratio, uses_generator=True)
def reduce_random(
    patches: torch.Tensor, cfg: ReducerConfig, generator: torch.Generator | None = None
) -> ReductionOutput:
    """(B, N, D) -> (B, K, D): a uniform random K-subset per row, drawn from ``generator`` (fresh per call).

    Top-K of i.i.d. uniform scores is a uniform K-subset; the subset is returned in spatial order.
    """
    b, n = patches.shape[:2]
    scores = torch.rand((b, n), generator=generator, device=patches.device)
    return keep_top_scores(patches, scores, count_by_ratio(n, cfg))
