"""Score-based selection shared by the strategies that keep a subset of tokens."""

from __future__ import annotations

from collections.abc import Callable

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput, num_kept
from prismatic_tr.reducers.registry import ReduceFn, ScoreFn, register_strategy


def count_by_ratio(n_patch: int, cfg: ReducerConfig) -> int:
    """K for score-based strategies: ``num_kept(n_patch, ratio)`` (ceil, at least 1)."""
    return num_kept(n_patch, cfg.reduction_ratio)


def top_indices(scores: torch.Tensor, k: int) -> torch.Tensor:
    """(B, N) scores -> (B, k) int64 indices of the ``k`` highest, ascending (ties broken by ``torch.topk``)."""
    return scores.topk(k, dim=1, sorted=False).indices.sort(dim=1).values


def top_indices_after_prefix(scores: torch.Tensor, k: int, num_prefix: int) -> torch.Tensor:
    """(B, N) patch scores -> (B, P + k) positions in the sequence [P prefix tokens, N patches]: the prefix
    first, then the ``k`` best patches (shifted by P), ascending. The prefix is given the highest score of the
    scores' kind (inf, or 2**62 above ``random``'s int64 scores, which are below 2**32) and selected with the patches (pad,
    topk, sort: no separate index arithmetic)."""
    if not num_prefix:
        return top_indices(scores, k)
    top = float("inf") if scores.is_floating_point() else float(2**62)  # int64's max does not survive a float
    return top_indices(torch.nn.functional.pad(scores, (num_prefix, 0), value=top), k + num_prefix)


def gather_tokens(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(B, N, D), (B, K) positions -> (B, K, D): one ``gather`` from ``x`` itself (gathering from a slice of
    ``x`` and concatenating miscompiles in torch 2.2's inductor)."""
    return x.gather(1, positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def take_along(t: torch.Tensor, index: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Rows of ``t`` (B or 1, T, ...) picked along ``dim`` by ``index`` (B, T'): (B, T', ...) for any trailing
    dims (a batch of 1 is broadcast). One ``gather``, static shapes; the one general row gather of the package."""
    shape = list(t.shape)
    shape[0] = index.shape[0]
    t = t.expand(*shape)
    view = [1] * t.dim()
    view[0], view[dim] = index.shape[0], index.shape[1]
    out_shape = list(t.shape)
    out_shape[dim] = index.shape[1]
    return t.gather(dim, index.view(*view).expand(*out_shape))


def gather_rows(x: torch.Tensor, idx: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """(B, offset + N, D), (B, K) -> (B, offset + K, D): the first ``offset`` rows of ``x`` unchanged, then
    rows ``offset + idx``, in one ``gather`` from ``x`` itself (no slice, no ``cat`` of features)."""
    if offset:
        prefix = torch.arange(offset, device=idx.device).expand(idx.shape[0], offset)
        idx = torch.cat([prefix, idx + offset], dim=1)
    return gather_tokens(x, idx)


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
