"""The package's tensor helpers: row gathers, top-k index selection and group means, static shapes, no host sync.

One place for each: the reducers, the vision towers' selection (:mod:`prismatic_tr.vit`), the language model's
pruning (:mod:`prismatic_tr.llm`) and the native model's generation import them from here.
"""

from __future__ import annotations

import torch


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


def group_means(
    patches: torch.Tensor, owner: torch.Tensor, k: int, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N, D) tokens, (B, N) group of each (0 .. k - 1, every group of positive weight) -> (B, k, D) each
    group's mean in ``patches``' dtype, weighted by ``weights`` (B, N) (None: 1 each), and (B, k) the groups' total
    weights (their sizes), both accumulated in at least float32 (two scatter-adds)."""
    b, n, d = patches.shape
    acc = torch.promote_types(patches.dtype, torch.float32)
    w = torch.ones(b, n, dtype=acc, device=patches.device) if weights is None else weights.to(acc)
    sums = patches.new_zeros(b, k, d, dtype=acc)
    sums = sums.scatter_add(1, owner.unsqueeze(-1).expand(b, n, d), patches.to(acc) * w.unsqueeze(-1))
    totals = w.new_zeros(b, k).scatter_add(1, owner, w)
    return (sums / totals.unsqueeze(-1)).to(patches.dtype), totals
