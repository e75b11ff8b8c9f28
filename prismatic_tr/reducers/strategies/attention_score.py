"""``attention_score``: keep the tokens most similar to the image's mean token."""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput
from prismatic_tr.reducers.registry import register_strategy
from prismatic_tr.reducers.strategies.selection import count_by_ratio, keep_top_scores


@register_strategy("attention_score", count=count_by_ratio)
def reduce_attention_score(
    patches: torch.Tensor, cfg: ReducerConfig, generator: torch.Generator | None = None
) -> ReductionOutput:
    """(B, N, D) -> (B, K, D): the K tokens with the highest cosine similarity to the row's mean token.

    The mean token stands in for a global query (a CLS token the OpenVLA backbones drop). Scores are
    ``<x_i, mean> / |x_i|`` in fp32: the cosine similarity up to the factor ``1 / |mean|``, which is the same for
    every token of a row and so does not change the ranking (and saves several kernels).
    """
    x = patches.float()
    dots = torch.bmm(x, x.mean(dim=1, keepdim=True).transpose(1, 2)).squeeze(-1)
    scores = dots / torch.linalg.vector_norm(x, dim=-1).clamp_min(1e-12)
    return keep_top_scores(patches, scores, count_by_ratio(patches.shape[1], cfg))
