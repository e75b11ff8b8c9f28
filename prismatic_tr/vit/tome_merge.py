"""Token Merging (Bolya et al., ICLR 2023): bipartite soft matching and size-weighted merging.

Pure tensor code following the published algorithm (reference: facebookresearch/ToMe ``tome/merge.py``,
re-implemented here). Generalised from "class token / distillation token" to any number P of leading
prefix tokens (DINOv2: CLS + 4 registers), which are never merged and stay first, in their order.
For P in {1, 2} the output order equals the reference's; for P = 0 the unmerged tokens are kept in
their original order (the reference leaves them in score order), which changes nothing downstream
because attention is permutation-equivariant.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["Merge", "bipartite_soft_matching", "merge_wavg", "parse_r"]

Merge = Callable[[torch.Tensor, str], torch.Tensor]


def parse_r(num_layers: int, r: int | list[int] | tuple[int, float]) -> list[int]:
    """ToMe's schedule: int (constant), list (per layer, zero-padded) or (r, inflection in [-1, 1]).

    (r, inflect) runs linearly from int(r * (1 - inflect)) to 2r minus that over the layers, as published.
    """
    if isinstance(r, list):
        return list(r) + [0] * (num_layers - len(r))
    inflect = 0.0
    if isinstance(r, tuple):
        r, inflect = r
    min_val = int(r * (1.0 - inflect))
    max_val = 2 * r - min_val
    step = (max_val - min_val) / max(num_layers - 1, 1)
    return [int(min_val + step * i) for i in range(num_layers)]


def _match(metric: torch.Tensor, r: int, num_prefix: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """metric (B, N, C) -> unmerged a-indices (B, Na - r, 1) ascending, src (B, r, 1), dst (B, r, 1)."""
    metric = metric / metric.norm(dim=-1, keepdim=True)
    a, b = metric[..., ::2, :], metric[..., 1::2, :]
    scores = a @ b.transpose(-1, -2)  # (B, Na, Nb) cosine similarity
    n_pa, n_pb = (num_prefix + 1) // 2, num_prefix // 2  # prefix tokens landing in a / in b
    if n_pa:
        scores[..., :n_pa, :] = -math.inf  # prefix tokens in a are never sources
    if n_pb:
        scores[..., :, :n_pb] = -math.inf  # nothing merges into prefix tokens in b
    node_max, node_idx = scores.max(dim=-1)
    edge_idx = node_max.argsort(dim=-1, descending=True)[..., None]
    unm_idx = edge_idx[..., r:, :].sort(dim=1).values
    src_idx = edge_idx[..., :r, :]
    dst_idx = node_idx[..., None].gather(dim=-2, index=src_idx)
    return unm_idx, src_idx, dst_idx


def bipartite_soft_matching(metric: torch.Tensor, r: int, num_prefix: int = 0) -> tuple[Merge, int]:
    """Match once on metric (B, N, C) and return ``(merge, r_used)``.

    Tokens alternate into sets a (even positions) and b (odd); each a-token points to its most similar
    b-token (cosine); the r a-tokens with the strongest match are merged into their b-partners.
    r is clamped to (N - P) // 2 as published. ``merge(x, mode)`` maps x (B, N, C') to
    (B, N - r_used, C') laid out as [prefix in order, unmerged a-tokens, b-tokens] and reduces merged
    pairs with ``mode`` ("sum", "mean", "amax", ...: any ``scatter_reduce`` mode).
    """
    r = min(r, (metric.shape[1] - num_prefix) // 2)
    if r <= 0:
        return (lambda x, mode="mean": x), 0
    with torch.no_grad():
        unm_idx, src_idx, dst_idx = _match(metric, r, num_prefix)
    n_pa, n_pb = (num_prefix + 1) // 2, num_prefix // 2

    def merge(x: torch.Tensor, mode: str = "mean") -> torch.Tensor:
        src, dst = x[..., ::2, :], x[..., 1::2, :]
        n, t1, c = src.shape
        unm = src.gather(dim=-2, index=unm_idx.expand(n, t1 - r, c))
        src = src.gather(dim=-2, index=src_idx.expand(n, r, c))
        dst = dst.scatter_reduce(-2, dst_idx.expand(n, r, c), src, reduce=mode)
        # prefix tokens are never merged, so x[:, :P] is exactly their merged value
        return torch.cat([x[:, :num_prefix], unm[:, n_pa:], dst[:, n_pb:]], dim=1)

    return merge, r


def merge_wavg(merge: Merge, x: torch.Tensor, size: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Size-weighted average merge. x (B, N, C), size (B, N, 1) or None (all ones) -> merged x, new size."""
    if size is None:
        size = torch.ones_like(x[..., 0, None])
    x = merge(x * size, "sum")
    size = merge(size, "sum")
    return x / size, size
