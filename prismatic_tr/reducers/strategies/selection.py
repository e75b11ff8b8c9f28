"""Score-based selection shared by the strategies that keep a subset of tokens."""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput, num_kept


def count_by_ratio(n_patch: int, cfg: ReducerConfig) -> int:
    """K for score-based strategies: ``num_kept(n_patch, ratio)`` (ceil, at least 1)."""
    return num_kept(n_patch, cfg.reduction_ratio)


def top_k_sorted(scores: torch.Tensor, k: int) -> torch.Tensor:
    """(B, N) scores -> (B, k) int64 indices of the ``k`` highest scores of each row, ascending (topk + sort)."""
    return scores.topk(k, dim=1, sorted=False).indices.sort(dim=1).values


def keep_top_scores(patches: torch.Tensor, scores: torch.Tensor, k: int) -> ReductionOutput:
    """Keep the ``k`` highest-scoring tokens of each row, in their original (ascending) order.

    Args:
        patches: (B, N, D) patch tokens.
        scores: (B, N) one score per token (any float dtype; ties are broken by ``torch.topk``).
        k: tokens kept, 1 <= k <= N (static).

    Returns:
        tokens (B, k, D) rows of ``patches``; indices (B, k) int64, ascending.

    Four kernels (topk, sort, gather; the expand is a view), no host sync, static shapes.
    """
    idx = top_k_sorted(scores, k)
    tokens = patches.gather(1, idx.unsqueeze(-1).expand(-1, -1, patches.shape[-1]))
    return ReductionOutput(tokens, idx)
