"""Other ways to make `diverse_merge`'s groups and merged tokens, for issue 48's experiment
(``benchmarks/metaworld_merge_groups.py`` puts them in place of the method's own for one run).

`diverse_merge` gives every patch to its nearest kept representative by cosine similarity
(:func:`~prismatic_tr.reducers.strategies.diverse_merge.nearest_owner`) and puts out each group's mean with its size.
Here: ``local`` groups (similarity minus grid distance), ``lloyd`` groups (one k-means step), and ``anchor`` /
``representative`` tokens (the representative's patch weighed as much as the rest of its group / alone), each with
the true group sizes. Static shapes, no host sync. Knows nothing about models.
"""

from __future__ import annotations

import torch

from prismatic_tr.reducers.tensor_ops import gather_rows, group_means

GROUPS = ("mean", "anchor", "representative", "local", "lloyd")


def own_groups(owner: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(B, N) group of each patch with every representative (B, K) put back in its own group."""
    return owner.scatter(1, idx, torch.arange(idx.shape[1], device=idx.device).expand_as(idx))


def local_owner(patches: torch.Tensor, idx: torch.Tensor, locality: float) -> torch.Tensor:
    """(B, N, D) patches of a square grid, (B, K) representatives -> (B, N): the representative of highest cosine
    similarity minus ``locality`` x grid distance / side."""
    n = patches.shape[1]
    side = int(round(n ** 0.5))
    if side * side != n:
        raise ValueError(f"--groups local needs a square patch grid; got {n} patches")
    cells = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij"), -1)
    cells = cells.reshape(n, 2).to(patches.device, torch.float32)
    x = torch.nn.functional.normalize(patches.float(), dim=-1)
    sim = torch.bmm(x, gather_rows(x, idx).transpose(1, 2))                         # (B, N, K)
    dist = torch.cdist(cells, cells)[:, idx].permute(1, 0, 2) / side                # (B, N, K)
    return own_groups((sim - locality * dist).argmax(-1), idx)


def lloyd_owner(patches: torch.Tensor, owner: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(B, N) groups after one k-means step in cosine: every patch to its nearest group mean."""
    x = torch.nn.functional.normalize(patches.float(), dim=-1)
    means = torch.nn.functional.normalize(group_means(x, owner, idx.shape[1])[0], dim=-1)
    return own_groups(torch.bmm(x, means.transpose(1, 2)).argmax(-1), idx)


def weighted_means(patches: torch.Tensor, owner: torch.Tensor, idx: torch.Tensor,
                   groups: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, K, D) merged tokens under ``groups`` ("anchor" or "representative") and the (B, K) true group sizes."""
    b, n = owner.shape
    k = idx.shape[1]
    sizes = torch.zeros(b, k, device=owner.device).scatter_add(1, owner, torch.ones(b, n, device=owner.device))
    if groups == "anchor":   # the representative weighs as much as the rest of its group (1 when alone)
        weights = torch.ones(b, n, device=owner.device).scatter(1, idx, (sizes - 1).clamp(min=1))
    else:                    # the representative alone
        weights = torch.zeros(b, n, device=owner.device).scatter(1, idx, 1.0)
    return group_means(patches, owner, k, weights)[0], sizes
