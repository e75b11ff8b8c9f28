"""Hand-built references for the position rule: the language model run by hand on ``[BOS, visual, text]`` at
given position ids, and the ids a reduced sequence must have, written out here independently of the package's
:func:`prismatic_tr.llm.positions.original_positions`.

Random-weight models barely use positions; :func:`sharpen_attention` scales the query and key projections so
that attention logits grow by ``factor ** 2`` and positions decide what a token attends to.
"""

from __future__ import annotations

import torch
from torch import nn


def sharpen_attention(lm: nn.Module, factor: float = 6.0) -> None:
    """Scale every decoder layer's q and k projection weights of ``lm`` by ``factor`` (in place)."""
    with torch.no_grad():
        for layer in lm.model.layers:
            layer.self_attn.q_proj.weight.mul_(factor)
            layer.self_attn.k_proj.weight.mul_(factor)


def expected_ids(kept: torch.Tensor | None, num_original: int, num_visual: int, text_len: int,
                 compact: bool = False) -> torch.Tensor:
    """(B, 1 + K + text_len) ids of ``[BOS, K visual tokens, text]``: original (BOS 0, visual ``1 + kept``, text
    from ``1 + N``) or compact (``0 .. T - 1``). ``kept`` (B, K) may be None for compact ids."""
    t = 1 + num_visual + text_len
    if compact:
        return torch.arange(t).expand(1 if kept is None else kept.shape[0], t)
    b = kept.shape[0]
    text = torch.arange(text_len, dtype=kept.dtype) + 1 + num_original
    return torch.cat([torch.zeros(b, 1, dtype=kept.dtype), 1 + kept, text.expand(b, -1)], dim=1)


def handbuilt_logits(lm: nn.Module, embed: nn.Module, input_ids: torch.Tensor, projected: torch.Tensor,
                     ids: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Logits (B, T, V) of ``lm`` on ``[BOS, projected, input_ids[:, 1:]]`` at position ids ``ids`` (B, T).

    An explicit all-ones (or ``key_mask``-based) 2-D attention mask keeps transformers 5 from reading gapped ids as
    packed sequences. Run it with no reduction attached (the package's hooks would remap the ids again).
    """
    text = embed(input_ids)
    seq = torch.cat([text[:, :1], projected.to(text.dtype), text[:, 1:]], dim=1)
    b, t = seq.shape[:2]
    mask = torch.ones(b, t, dtype=torch.long) if key_mask is None else torch.cat(
        [key_mask[:, :1], torch.ones(b, projected.shape[1], dtype=key_mask.dtype), key_mask[:, 1:]], dim=1).long()
    with torch.no_grad():
        return lm(inputs_embeds=seq, attention_mask=mask, position_ids=ids).logits
