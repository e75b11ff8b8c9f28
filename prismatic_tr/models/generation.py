"""Greedy / sampling decoding with a KV cache for a ``LlamaForCausalLM`` fed by ``inputs_embeds``.

Our own loop instead of transformers' ``GenerationMixin`` (whose behaviour changed across versions; OpenVLA's
remote code on transformers >= 4.50 silently drops the image, openvla/openvla#346). The prompt is prefilled
once, then each step feeds one token. No early stop on EOS: exactly ``max_new_tokens`` tokens, static shapes,
no host syncs.

Padding: the prefill input is made left-aligned (padding first) with a stable sort of the attention mask,
so prompts may come left- or right-padded; position ids are counted from the mask (first real token = 0),
which makes a padded row give the same result as the same prompt alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaForCausalLM


@dataclass
class GenerateOutput:
    """``sequences`` (B, L + new) token ids; ``logits`` (B, new, V) float32 logits of each generated step."""

    sequences: torch.Tensor
    logits: torch.Tensor


@dataclass
class DecodeState:
    """What a decode step needs: the cache, the running mask (B, T) and the next position ids (B, 1)."""

    past_key_values: object
    attention_mask: torch.Tensor
    next_position: torch.Tensor


def _reorder(
    order: torch.Tensor, mask: torch.Tensor, tensors: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, ...]:
    """Gather ``mask`` (B, T) and each (B, T, ...) tensor along dim 1 with ``order`` (B, T)."""
    out = [mask.gather(1, order)]
    for t in tensors:
        idx = order.view(*order.shape, *([1] * (t.dim() - 2))).expand(*order.shape, *t.shape[2:])
        out.append(t.gather(1, idx))
    return tuple(out)


def to_left_padding(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Reorder each row so padded positions (mask 0) come first, real ones after in their original order.

    Args:
        mask: (B, T) attention mask (1 real, 0 pad).
        tensors: (B, T, ...) tensors to reorder the same way.
    Returns:
        (mask, *tensors), each reordered; a stable sort, static shapes, no host sync.
    """
    return _reorder(torch.argsort(mask.long(), dim=1, stable=True), mask, tensors)


def to_right_padding(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Like :func:`to_left_padding` but real positions first (so BOS sits at position 0 of every row)."""
    return _reorder(torch.argsort(1 - mask.long(), dim=1, stable=True), mask, tensors)


def prefill(
    lm: LlamaForCausalLM, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, DecodeState]:
    """Run the prompt once (the output of ``build_multimodal_inputs`` can be passed as is).

    Args:
        inputs_embeds: (B, T, D); attention_mask: (B, T) with padding anywhere, or None (no padding).
            Rows are left-aligned first (a stable gather), so the last position is a real token.
    Returns:
        logits of the last position (B, V) and the state for :func:`decode_step`.
    """
    if attention_mask is None:
        attention_mask = torch.ones(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
    else:
        attention_mask, inputs_embeds = to_left_padding(attention_mask, inputs_embeds)
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = lm.model(
        inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=positions, use_cache=True
    )
    logits = lm.lm_head(out.last_hidden_state[:, -1, :])
    return logits, DecodeState(out.past_key_values, attention_mask, positions[:, -1:] + 1)


def decode_step(
    lm: LlamaForCausalLM, token: torch.Tensor, state: DecodeState
) -> tuple[torch.Tensor, DecodeState]:
    """Feed one token per row. token: (B, 1) ids. Returns logits (B, V) and the advanced state."""
    ones = torch.ones_like(state.attention_mask[:, :1])
    mask = torch.cat([state.attention_mask, ones], dim=1)
    out = lm.model(
        input_ids=token,
        attention_mask=mask,
        position_ids=state.next_position,
        past_key_values=state.past_key_values,
        use_cache=True,
    )
    logits = lm.lm_head(out.last_hidden_state[:, -1, :])
    return logits, DecodeState(out.past_key_values, mask, state.next_position + 1)


def select_token(
    logits: torch.Tensor, do_sample: bool, temperature: float, generator: torch.Generator | None
) -> torch.Tensor:
    """(B, V) logits -> (B, 1) ids: argmax, or a draw from softmax(logits / temperature)."""
    if not do_sample:
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def decode_loop(
    lm: LlamaForCausalLM,
    first_logits: torch.Tensor,
    state: DecodeState,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    keep_logits: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Generate ``max_new_tokens`` tokens after a prefill.

    Returns:
        new token ids (B, new) and, if ``keep_logits``, their step logits (B, new, V) in float32, else None.
    """
    tokens, step_logits = [], []
    logits = first_logits
    for step in range(max_new_tokens):
        if keep_logits:
            step_logits.append(logits.float())
        token = select_token(logits, do_sample, temperature, generator)
        tokens.append(token)
        if step + 1 < max_new_tokens:
            logits, state = decode_step(lm, token, state)
    return torch.cat(tokens, dim=1), (torch.stack(step_logits, dim=1) if keep_logits else None)


def validate_generation_args(max_new_tokens: int, do_sample: bool, temperature: float) -> None:
    """Raise ValueError for a non-positive token count or temperature."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}; must be >= 1")
    if do_sample and not temperature > 0:
        raise ValueError(f"temperature={temperature}; must be > 0 when do_sample=True")
