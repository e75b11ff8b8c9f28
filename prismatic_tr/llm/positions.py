"""The position rule, written once: where a token of a reduced sequence sits in the unreduced one.

OpenVLA's language model reads ``[BOS, v_0 .. v_{N-1}, text ...]``: BOS at position 0, visual token ``i`` at
``1 + i`` (with several images, image ``m``'s patch ``i`` is visual token ``m * P + i``), text after all ``N``
visual tokens. A reduction before the language model hands it ``K < N`` visual tokens, so the sequence it
actually runs is ``[BOS, v'_0 .. v'_{K-1}, text ...]`` and its position ids, counted the usual way (from the
first real token, or from the KV cache's length in a decode step), are *compact*: kept token ``j`` at ``1 + j``
and every text or generated token ``N - K`` earlier than without reduction.

:func:`original_positions` maps compact ids to the ids the same tokens have without reduction (kept token ``j``
to ``1 + kept[j]``, every later token ``+ N - K``). It is an elementwise function of the compact ids, so the same
call serves a prefill, every decode step and a training forward, whatever the padding (a pad's id is never
read). Pure tensors: static shapes, no host sync.
"""

from __future__ import annotations

import torch


def original_positions(compact: torch.Tensor, kept: torch.Tensor, num_original: int) -> torch.Tensor:
    """Compact position ids -> the unreduced sequence's position ids.

    Args:
        compact: (B, T) or (1, T) position ids on the reduced sequence (BOS 0, visual tokens 1 .. K, then text).
        kept: (B, K) where each visual token of the reduced sequence sits among the ``num_original`` unreduced
            visual tokens: int64 indices for kept tokens, float for tokens that stand for several (a pooled
            window's position, possibly fractional: rotary embeddings take any real position).
        num_original: N, the visual tokens per sample without reduction.

    Returns:
        (B, T): 0 stays 0 (BOS), ``p`` in [1, K] becomes ``1 + kept[:, p - 1]``, ``p > K`` becomes
        ``p + N - K``; int64 when ``kept`` is, else ``kept``'s float dtype.
    """
    b, k = kept.shape
    compact = compact.expand(b, -1)
    visual = 1 + kept.gather(1, (compact - 1).clamp(0, k - 1))
    later = compact + (num_original - k)
    out = torch.where(compact > k, later.to(visual.dtype), visual)
    return torch.where(compact < 1, compact.to(visual.dtype), out)
