"""``topk_magnitude``: keep the tokens with the largest L2 norm."""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig
from prismatic_tr.reducers.strategies.selection import register_selection


@register_selection("topk_magnitude")
def score_topk_magnitude(
    patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None = None
) -> torch.Tensor:
    """(B, N, D) -> (B, N): each token's L2 norm, computed in fp32; the K largest are kept, in spatial order."""
    return torch.linalg.vector_norm(patches, dim=-1, dtype=torch.float32)
