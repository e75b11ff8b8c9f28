"""hquota_ff: hub quota + farthest-first selection in attention-signature space, then nearest merging.

Pure tensor code. For a block's attention probabilities A (B, H, N, N):
1. signature of token j = attention it receives per head, ``sum_i A[b, h, i, j]`` -> (B, N, H);
2. hubs: the ``num_hubs`` patch tokens with the largest inflow (signature summed over heads) x size;
3. fill: repeatedly add the patch token farthest (cosine distance of signatures) from everything
   kept so far, until ``num_keep`` patch tokens are kept (K - hubs sequential steps, 4 small ops each);
4. merge: every dropped patch token goes into its nearest kept patch token, size-weighted
   (x_k = sum_i s_i x_i / sum_i s_i), and the new sizes are returned for proportional attention.
Prefix tokens (CLS, registers) are never dropped and never receive merges; they stay first.
"""

from __future__ import annotations

import torch

from prismatic_tr.reducers.tensor_ops import group_means

__all__ = ["farthest_first_select", "hquota_merge", "merge_into_nearest", "received_attention"]


def received_attention(probs: torch.Tensor) -> torch.Tensor:
    """probs (B, H, N, N) (rows = queries, softmax over keys) -> signature (B, N, H): inflow per head."""
    return probs.sum(dim=2).transpose(1, 2)


def _cosine_distance(sig: torch.Tensor) -> torch.Tensor:
    """sig (B, M, H) -> pairwise cosine distance (B, M, M) in [0, 2]."""
    unit = sig / sig.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return 1.0 - unit @ unit.transpose(1, 2)


def farthest_first_select(dist: torch.Tensor, hub_score: torch.Tensor, num_keep: int, num_hubs: int) -> torch.Tensor:
    """Choose ``num_keep`` of M tokens: ``num_hubs`` by score, the rest farthest-first.

    dist (B, M, M) pairwise distances, hub_score (B, M) -> kept indices (B, num_keep), ascending.
    Static shapes: the loop length depends only on num_keep and num_hubs.
    """
    B, M, _ = dist.shape
    num_hubs = max(1, min(num_hubs, num_keep))
    hubs = hub_score.topk(num_hubs, dim=-1).indices  # (B, q)
    # distance to the nearest kept token; kept tokens are pinned at -1 so argmax never picks them again
    min_dist = dist.gather(1, hubs.unsqueeze(-1).expand(B, num_hubs, M)).amin(dim=1).scatter(1, hubs, -1.0)
    picks = [hubs]
    for _ in range(num_keep - num_hubs):  # 4 small ops per step: argmax, gather, minimum, scatter
        new = min_dist.argmax(dim=-1, keepdim=True)  # (B, 1)
        row = dist.gather(1, new.unsqueeze(-1).expand(B, 1, M)).squeeze(1)
        min_dist = torch.minimum(min_dist, row).scatter(1, new, -1.0)
        picks.append(new)
    return torch.cat(picks, dim=1).sort(dim=-1).values


def merge_into_nearest(
    x: torch.Tensor, size: torch.Tensor, dist: torch.Tensor, keep_idx: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Size-weighted merge of every token into its nearest kept token (kept tokens map to themselves).

    x (B, M, C), size (B, M, 1), dist (B, M, M), keep_idx (B, K) ascending -> x (B, K, C), size (B, K, 1).
    The means and sizes are accumulated in at least float32 (:func:`~prismatic_tr.reducers.tensor_ops.group_means`),
    returned in x's and size's dtypes.
    """
    B, M, _ = x.shape
    K = keep_idx.shape[1]
    assign = dist.gather(2, keep_idx.unsqueeze(1).expand(B, M, K)).argmin(dim=-1)  # (B, M) in [0, K)
    slots = torch.arange(K, device=x.device).expand(B, K)
    assign = assign.scatter(1, keep_idx, slots)
    merged, totals = group_means(x, assign, K, size[..., 0])
    return merged, totals.unsqueeze(-1).to(size.dtype)


def hquota_merge(
    x: torch.Tensor, size: torch.Tensor, probs: torch.Tensor, num_keep: int, num_prefix: int, hub_fraction: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One hquota_ff step. x (B, N, C), size (B, N, 1), probs (B, H, N, N) -> (B, P + num_keep, C), sizes.

    ``num_hubs = round(hub_fraction * num_keep)`` (at least 1, to seed farthest-first).
    """
    P = num_prefix
    with torch.no_grad():
        sig = received_attention(probs)[:, P:]  # (B, M, H)
        dist = _cosine_distance(sig.float())
        hub_score = sig.sum(dim=-1) * size[:, P:, 0]
        keep_idx = farthest_first_select(dist, hub_score, num_keep, round(hub_fraction * num_keep))
    merged, new_size = merge_into_nearest(x[:, P:], size[:, P:], dist, keep_idx)
    return torch.cat([x[:, :P], merged], dim=1), torch.cat([size[:, :P], new_size], dim=1)
