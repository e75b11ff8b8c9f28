"""``attention_score``: keep the tokens most similar to the image's mean token."""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig
from prismatic_tr.reducers.strategies.selection import register_selection


@register_selection("attention_score")
def score_attention(
    patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None = None
) -> torch.Tensor:
    """(B, N, D) -> (B, N) scores: the K tokens with the highest cosine similarity to the row's mean token
    are kept, in spatial order.

    The mean token stands in for a global query (a CLS token the OpenVLA backbones drop). Scores are
    ``<x_i, mean> / |x_i|`` in fp32: the cosine similarity up to the factor ``1 / |mean|``, which is the same for
    every token of a row and so does not change the ranking (and saves several kernels).
    """
    x = patches.float()
    dots = torch.bmm(x, x.mean(dim=1, keepdim=True).transpose(1, 2)).squeeze(-1)
    return dots / torch.linalg.vector_norm(x, dim=-1).clamp_min(1e-12)
