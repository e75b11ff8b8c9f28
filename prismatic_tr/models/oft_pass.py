"""The tensors of OpenVLA-OFT's one parallel pass, as pure functions of shapes (no model, no host sync).

OFT's sequence per sample: ``[BOS, visual (n images x K), proprio?, prompt after BOS (ending with 29871),
S action slots (zero embeddings), stop]``, S = chunk x action_dim. The language model runs once over it; the
hidden state at position ``p`` is the one trained to predict token ``p + 1``, so the actions are read from the S
positions starting one before the first slot. Rows of a padded batch hold their real tokens first (the
package's prompt layout, :mod:`prismatic_tr.models.prompt`): the slots follow each row's own prompt and the pads
come last, where causal attention never reads them and the bidirectional masks leave them out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .generation import to_right_padding
from .prompt import Prompt


@dataclass
class ActionSequence:
    """The text side of the pass. ids (B, T): prompt, slots, stop, pads last; slot (B, T) bool: the action slots;
    key_mask (B, T) bool real tokens, or None (nothing padded); prompt_len (B, 1): real prompt tokens (BOS and the
    empty token included) of each row, or None (every row has all T - S - 1)."""

    ids: torch.Tensor
    slot: torch.Tensor
    key_mask: torch.Tensor | None
    prompt_len: torch.Tensor | None


# follows OpenVLA-OFT 213c5ff8 prismatic/extern/hf/modeling_prismatic.py _prepare_input_for_action_prediction (MIT, see
# NOTICE): S placeholders then the stop token after the prompt; the placeholders' embeddings are zeroed.
def action_sequence(prompt: Prompt, num_slots: int, stop_token_id: int, placeholder_id: int = 1) -> ActionSequence:
    """The prompt (B, L) followed by ``num_slots`` placeholders and the stop token; see :class:`ActionSequence`."""
    ids = prompt.ids
    b, length = ids.shape
    # built from filled tensors, not by assigning Python numbers into slices (a copy from host memory on torch 2.2 and
    # 2.11, which a CUDA-graph capture refuses; prismatic_tr.bench.measure.ops.find_capture_hazards)
    full = functools.partial(torch.full, device=ids.device)
    ids = torch.cat([ids, full((b, num_slots), placeholder_id, dtype=ids.dtype),
                     full((b, 1), stop_token_id, dtype=ids.dtype)], dim=1)
    slot = torch.cat([full((b, length), False), full((b, num_slots), True), full((b, 1), False)], dim=1)
    if prompt.key_mask is None:
        return ActionSequence(ids, slot, None, None)
    key_mask = prompt.key_mask.to(ids.device).bool()
    prompt_len = key_mask.sum(dim=1, keepdim=True)
    key_mask = torch.cat([key_mask, torch.ones_like(key_mask[:, :1]).expand(b, num_slots + 1)], dim=1)
    key_mask, ids, slot = to_right_padding(key_mask, ids, slot)
    return ActionSequence(ids, slot, key_mask, prompt_len)


def insert_after_bos(text: torch.Tensor, visual: torch.Tensor) -> torch.Tensor:
    """(B, T, D) text embeddings, (B, V, D) visual (+ proprio) tokens -> (B, 1 + V + T - 1, D), BOS first.

    One index_select over [visual, text] (as ``build_multimodal_inputs``: slicing and concatenating miscompiles in
    torch 2.2's inductor)."""
    v, dev = visual.shape[1], text.device
    order = torch.cat([torch.full((1,), v, device=dev), torch.arange(v, device=dev),
                       torch.arange(v + 1, v + text.shape[1], device=dev)])
    return torch.cat([visual.to(text.dtype), text], dim=1).index_select(1, order)


def insert_flags(flags: torch.Tensor, num_visual: int, value: bool) -> torch.Tensor:
    """(B, T) bool text flags -> (B, 1 + V + T - 1) with ``value`` at the V visual positions after BOS."""
    fill = torch.full((flags.shape[0], num_visual), value, dtype=torch.bool, device=flags.device)
    return torch.cat([flags[:, :1], fill, flags[:, 1:]], dim=1)


def attention_bias(attention: str, slot: torch.Tensor, key_mask: torch.Tensor | None,
                   dtype: torch.dtype) -> torch.Tensor | None:
    """The (B, 1, T, T) additive mask of the pass (0 where a query may attend, dtype's minimum elsewhere), or None
    for ``"causal"`` (pads sit after every real token, so plain causal attention never reads them).

    ``slot``: (B, T) bool action slots of the full sequence; ``key_mask``: (B, T) bool real tokens or None.
    """
    if attention == "causal":
        return None
    b, t = slot.shape
    if attention == "bidirectional":
        allowed = torch.ones((1, t, t), dtype=torch.bool, device=slot.device)
    elif attention == "bidirectional_actions":
        causal = torch.ones((t, t), dtype=torch.bool, device=slot.device).tril()
        allowed = causal[None] | (slot[:, :, None] & slot[:, None, :])
    else:
        raise ValueError(f"attention={attention!r}; allowed: 'causal', 'bidirectional', 'bidirectional_actions'")
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, :]
    allowed = allowed.expand(b, t, t)
    bias = torch.zeros((b, t, t), dtype=dtype, device=slot.device)
    return bias.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def slot_hidden_index(prompt_len: torch.Tensor | None, text_len: int, num_visual: int, num_slots: int,
                      batch: int, device: torch.device) -> torch.Tensor:
    """(B, S) positions whose hidden states predict the S action slots: from one before the first slot on.

    Row b's first slot sits at ``1 + V + prompt_len_b - 1``; without padding ``prompt_len`` is ``text_len - S - 1``.
    """
    if prompt_len is None:
        prompt_len = torch.full((batch, 1), text_len - num_slots - 1, dtype=torch.long, device=device)
    start = num_visual + prompt_len.to(device) - 1
    return start + torch.arange(num_slots, device=device)[None]
