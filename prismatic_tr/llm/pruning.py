"""Which visual tokens the text attends to, and the static-shape gathers that drop the others (pure tensors).

FastV / VLA-Pruner style: after layer ``k`` of the prefill, score each visual token by the attention the last
prompt positions pay it, averaged over heads and those queries, and keep the best. The score is computed
from the layer's queries of the last ``M`` positions and its keys of the visual positions (a few matmuls):
the ``T x T`` attention map is never formed, so the layers themselves keep fused attention (SDPA).

Sequence layout per row: ``[BOS, v_1 .. v_K, text ...]`` with padding before (left-padded) or after
(right-padded) the real tokens; :func:`visual_window` reads where each row's visual tokens start and where its
last real token is from the key mask (or, without one, from the layout itself). Everything here takes shapes
and tensors only: no host sync, no Python branch on a value, the kept count a function of K and the ratio.
"""

from __future__ import annotations

import math

import torch

from prismatic_tr.reducers.config import num_kept
from prismatic_tr.reducers.tensor_ops import top_indices

__all__ = ["num_kept", "prune_index", "query_index", "select_visual", "visual_token_scores", "visual_window"]


def visual_window(key_mask: torch.Tensor | None, batch: int, length: int,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each row's visual tokens start and where its last real token is.

    Args:
        key_mask: (B, T) 1 / True at real tokens (padding before or after them), or None (no padding).
        batch, length: B and T (used when ``key_mask`` is None).
    Returns:
        start (B,): index of the first visual token, one after the row's first real token (BOS);
        last (B,): index of the row's last real token.
    """
    if key_mask is None:
        return (torch.ones(batch, dtype=torch.long, device=device),
                torch.full((batch,), length - 1, dtype=torch.long, device=device))
    real = key_mask.to(torch.int32)
    first = real.argmax(dim=1)  # argmax returns the first maximum
    last = length - 1 - real.flip(1).argmax(dim=1)
    return first + 1, last


def query_index(start: torch.Tensor, last: torch.Tensor, num_visual: int, num_queries: int) -> torch.Tensor:
    """(B, M) indices of each row's last ``M`` real positions, the queries that score the visual tokens;
    ``M = num_queries``; a row with fewer text tokens repeats its first text position (never a visual one)."""
    back = torch.arange(num_queries - 1, -1, -1, device=last.device)
    return torch.maximum(last[:, None] - back, (start + num_visual)[:, None])


def visual_token_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Head- and query-averaged attention of ``M`` query positions over ``K`` visual keys.

    Args:
        queries: (B, H, M, d) after the rotary embedding; keys: (B, H, K, d) likewise (KV heads already
            repeated to H).
    Returns:
        (B, K) float32 scores: ``mean_{h, m} softmax_K(q_hm . k_h / sqrt(d))``.
    """
    logits = torch.matmul(queries.float(), keys.float().transpose(-1, -2)) / math.sqrt(queries.shape[-1])
    return logits.softmax(dim=-1).mean(dim=(1, 2))


def prune_index(seq_len: int, start: torch.Tensor, num_visual: int, kept: torch.Tensor) -> torch.Tensor:
    """Positions that stay, in order: (B, T - K + n) with n = kept.shape[1].

    Args:
        seq_len: T. start: (B,) first visual position per row. num_visual: K. kept: (B, n) indices in [0, K)
            of the visual tokens kept (any order).
    Every non-visual position stays. A stable sort of "kept position" keys puts exactly the T - K + n kept
    positions first, in order, so the shape is static and nothing is read on the host.
    """
    b = start.shape[0]
    pos = torch.arange(seq_len, device=start.device).expand(b, seq_len)
    rel = pos - start[:, None]
    visual = (rel >= 0) & (rel < num_visual)
    keep_visual = torch.zeros(b, num_visual, dtype=torch.bool, device=start.device).scatter(1, kept, True)
    keep = ~visual | keep_visual.gather(1, rel.clamp(0, num_visual - 1))
    order = torch.where(keep, pos, pos + seq_len).argsort(dim=1, stable=True)
    return order[:, : seq_len - num_visual + kept.shape[1]]


def select_visual(scores: torch.Tensor, keep_ratio: float) -> torch.Tensor:
    """(B, K) scores -> (B, n) indices of the ``n = num_kept(K, keep_ratio)`` best visual tokens, ascending."""
    return top_indices(scores, num_kept(scores.shape[1], keep_ratio))
