"""``topk_magnitude``: keep the tokens with the largest L2 norm."""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput
from prismatic_tr.reducers.registry import register_strategy
from prismatic_tr.reducers.strategies.selection import count_by_ratio, keep_top_scores


@register_strategy("topk_magnitude", count=count_by_ratio)
def reduce_topk_magnitude(
    patches: torch.Tensor, cfg: ReducerConfig, generator: torch.Generator | None = None
) -> ReductionOutput:
    """(B, N, D) -> (B, K, D): the K tokens of largest L2 norm (computed in fp32), in spatial order."""
    scores = torch.linalg.vector_norm(patches, dim=-1, dtype=torch.float32)
    return keep_top_scores(patches, scores, count_by_ratio(patches.shape[1], cfg))
