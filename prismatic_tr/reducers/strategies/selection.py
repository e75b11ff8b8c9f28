"""Score-based selection shared by the strategies that keep a subset of tokens."""

from __future__ import annotations

from collections.abc import Callable

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput, num_kept
from prismatic_tr.reducers.registry import ReduceFn, ScoreFn, register_strategy
from prismatic_tr.reducers.tensor_ops import gather_rows, top_indices


def count_by_ratio(n_patch: int, cfg: ReducerConfig) -> int:
    """K for score-based strategies: ``num_kept(n_patch, ratio)`` (ceil, at least 1)."""
    return num_kept(n_patch, cfg.keep_ratio)


def keep_top_scores(patches: torch.Tensor, scores: torch.Tensor, k: int) -> ReductionOutput:
    """Keep the ``k`` highest-scoring tokens of each row, in their original (ascending) order.

    Args:
        patches: (B, N, D) patch tokens.
        scores: (B, N) one score per token (any real dtype; ties are broken by ``torch.topk``).
        k: tokens kept, 1 <= k <= N (static).

    Returns:
        tokens (B, k, D) rows of ``patches``; indices (B, k) int64, ascending.

    Three kernels (topk, sort, gather; the expand is a view), no host sync, static shapes.
    """
    idx = top_indices(scores, k)
    return ReductionOutput(gather_rows(patches, idx), idx)


def register_selection(name: str, uses_key: bool = False) -> Callable[[ScoreFn], ScoreFn]:
    """Decorator: register a strategy that keeps the top ``count_by_ratio`` tokens of ``score_fn``'s scores.

    ``score_fn(patches (B, N, D), cfg, rng) -> (B, N)``; the strategy's ``reduce`` is
    ``keep_top_scores(patches, score_fn(...), count_by_ratio(N, cfg))``.
    """

    def deco(score_fn: ScoreFn) -> ScoreFn:
        def reduce(patches: torch.Tensor, cfg: ReducerConfig,
                   rng: torch.Tensor | torch.Generator | None = None) -> ReductionOutput:
            return keep_top_scores(patches, score_fn(patches, cfg, rng), count_by_ratio(patches.shape[1], cfg))

        reduce.__doc__ = f"(B, N, D) -> (B, K, D): the K tokens of highest {name} score, in spatial order."
        fn: ReduceFn = reduce
        register_strategy(name, count=count_by_ratio, uses_key=uses_key, score=score_fn)(fn)
        return score_fn

    return deco
