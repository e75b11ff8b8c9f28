"""Greedy / sampling decoding with a KV cache for a ``LlamaForCausalLM`` fed by ``inputs_embeds``.

Our own loop instead of transformers' ``GenerationMixin`` (whose behaviour changed across versions; OpenVLA's
remote code on transformers >= 4.50 silently drops the image, openvla/openvla#346). The prompt is prefilled
once, then each step feeds one token. No early stop on EOS: exactly ``max_new_tokens`` tokens, static shapes.

Masks and host syncs: a batch without padding runs with no attention mask at all (SDPA's causal path), and
then no operator reads a tensor value on the host. A padded batch is left-aligned (padding first) with a
stable sort of its key mask, positions are counted from the mask (first real token = 0, so a padded row gives
the same result as the same prompt alone), and the mask goes to the language model: on transformers >= 5 as
a ready 4-D additive mask, which transformers uses as is (no host sync); on older versions as the 2-D mask,
which transformers expands itself, reading it on the host once per forward (``torch.all(mask == 1)``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import transformers
from transformers import LlamaForCausalLM
from transformers.modeling_outputs import CausalLMOutputWithPast

PASS_4D_MASK = int(transformers.__version__.split(".")[0]) >= 5
# The KV cache's name in model forward kwargs and outputs: ``cache`` from transformers 5.24 on (where
# ``past_key_values`` is a deprecated alias), ``past_key_values`` before.
CACHE_NAME = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


@dataclass
class GenerateOutput:
    """``sequences`` (B, L + new) token ids; ``logits`` (B, new, V) float32 logits of each generated step."""

    sequences: torch.Tensor
    logits: torch.Tensor


@dataclass
class DecodeState:
    """What a decode step needs: the cache, the real keys so far (B, T) bool or None when nothing is padded,
    and the next position ids (B, 1)."""

    past_key_values: object
    key_mask: torch.Tensor | None
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
        mask: (B, T) attention mask (1 / True real, 0 / False pad).
        tensors: (B, T, ...) tensors to reorder the same way.
    Returns:
        (mask, *tensors), each reordered; a stable sort, static shapes, no host sync.
    """
    return _reorder(torch.argsort(mask.long(), dim=1, stable=True), mask, tensors)


def to_right_padding(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Like :func:`to_left_padding` but real positions first (so BOS sits at position 0 of every row)."""
    return _reorder(torch.argsort(1 - mask.long(), dim=1, stable=True), mask, tensors)


def llm_attention_mask(key_mask: torch.Tensor, q_len: int, dtype: torch.dtype) -> torch.Tensor:
    """The mask handed to the language model for queries at the last ``q_len`` of ``T`` key positions.

    key_mask: (B, T) bool, True at real (attendable) keys. Returns, on transformers >= 5, a (B, 1, q_len, T)
    additive mask (0 where a query may attend: causal, a real key, or itself; dtype's minimum elsewhere;
    a padded query attends to itself so no row is empty); on older transformers the (B, T) long 2-D mask.
    """
    if not PASS_4D_MASK:
        return key_mask.long()
    t = key_mask.shape[1]
    k_pos = torch.arange(t, device=key_mask.device)
    q_pos = k_pos[t - q_len :]
    causal = k_pos[None, :] <= q_pos[:, None]  # (q, T)
    allowed = (causal[None] & key_mask[:, None, :]) | (k_pos[None, :] == q_pos[:, None])[None]
    bias = torch.zeros(allowed.shape, dtype=dtype, device=key_mask.device)
    return bias.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def prefill(
    lm: LlamaForCausalLM, inputs_embeds: torch.Tensor, key_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, DecodeState]:
    """Run the prompt once (the output of ``build_multimodal_inputs`` can be passed as is).

    Args:
        inputs_embeds: (B, T, D); key_mask: (B, T) with padding anywhere (bool or 0/1), or None (no padding).
            Padded rows are left-aligned first (a stable gather), so the last position is a real token.
    Returns:
        logits of the last position (B, V) and the state for :func:`decode_step`.
    """
    b, t = inputs_embeds.shape[:2]
    if key_mask is None:
        positions = torch.arange(t, device=inputs_embeds.device).expand(b, t)
        mask = None
    else:
        key_mask, inputs_embeds = to_left_padding(key_mask.bool(), inputs_embeds)
        positions = (key_mask.long().cumsum(-1) - 1).clamp(min=0)
        mask = llm_attention_mask(key_mask, t, inputs_embeds.dtype)
    out = lm.model(inputs_embeds=inputs_embeds, attention_mask=mask, position_ids=positions, use_cache=True)
    logits = lm.lm_head(out.last_hidden_state[:, -1, :])
    return logits, DecodeState(getattr(out, CACHE_NAME), key_mask, positions[:, -1:] + 1)


def decode_step(
    lm: LlamaForCausalLM, token: torch.Tensor, state: DecodeState
) -> tuple[torch.Tensor, DecodeState]:
    """Feed one token per row. token: (B, 1) ids. Returns logits (B, V) and the advanced state."""
    key_mask, mask = None, None
    if state.key_mask is not None:
        key_mask = torch.cat([state.key_mask, torch.ones_like(state.key_mask[:, :1])], dim=1)
        mask = llm_attention_mask(key_mask, 1, lm.lm_head.weight.dtype)
    out = lm.model(
        input_ids=token,
        attention_mask=mask,
        position_ids=state.next_position,
        use_cache=True,
        **{CACHE_NAME: state.past_key_values},
    )
    logits = lm.lm_head(out.last_hidden_state[:, -1, :])
    return logits, DecodeState(getattr(out, CACHE_NAME), key_mask, state.next_position + 1)


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
