"""Greedy / sampling decoding with a KV cache for a ``LlamaForCausalLM`` fed by ``inputs_embeds``.

Our own loop instead of transformers' ``GenerationMixin`` (whose behaviour changed across versions; OpenVLA's
remote code on transformers >= 4.50 silently drops the image, openvla/openvla#346). The prompt is prefilled
once, then each step feeds one token. No early stop on EOS: exactly ``max_new_tokens`` tokens, static shapes.

Layout, masks and host syncs (the same on transformers 4.40 and 5.x, padded or not, on any device): every row
holds its real tokens first (BOS at index 0; a padded prompt is right-padded), so the position ids are
``0 .. T - 1`` in every row and the prefill needs no attention mask at all: causal attention never lets a real
token see a pad that comes after it, so SDPA keeps its causal path (free to choose its fastest kernel) whatever
the padding, and each row's logits are read at its last real position (one gather). A decode step's token sits at
its row's next position and must not see that row's pads: when the prompt is padded, and only then, every
decoder layer is handed a ``(B, 1, 1, T')`` additive mask by a forward pre-hook for that step. transformers
itself is always called with ``attention_mask=None``, so it neither builds nor reads a mask (given a 2-D or 4-D
mask, transformers 4.40 reads it on the host at every forward). The prefill announces itself and its key mask to
hooks on the language model (:func:`prismatic_tr.llm.calls.announce_prefill`): the llm site prunes only there.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import LlamaForCausalLM
from transformers.modeling_outputs import CausalLMOutputWithPast

from prismatic_tr.llm.calls import announce_prefill
from prismatic_tr.reducers.tensor_ops import take_along

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


def to_right_padding(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Reorder each row so its real positions (mask 1 / True) come first, in their original order, pads after.

    Args:
        mask: (B, T) attention mask (1 / True real, 0 / False pad).
        tensors: (B, T, ...) tensors to reorder the same way.
    Returns:
        (mask, *tensors), each reordered; a stable sort and one gather each, static shapes, no host sync.
    """
    order = torch.argsort(1 - mask.long(), dim=1, stable=True)
    return tuple(take_along(t, order) for t in (mask, *tensors))


def decode_mask(key_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) bool real keys -> (B, 1, 1, T) additive mask for one query per row: 0 at real keys, dtype's
    minimum at pads."""
    bias = torch.zeros(key_mask.shape, dtype=dtype, device=key_mask.device)
    return bias.masked_fill(~key_mask, torch.finfo(dtype).min)[:, None, None, :]


@contextlib.contextmanager
def every_layer_gets(lm: nn.Module, mask: torch.Tensor | None) -> Iterator[None]:
    """Inside the block every decoder layer of ``lm`` is called with ``attention_mask=mask`` (None: causal SDPA),
    whatever transformers prepared (a forward pre-hook, run before any other hook on the layer). The one place
    that hands the layers a mask: the decode steps here, OpenVLA-OFT's parallel pass (:mod:`.oft`)."""

    def hand_in(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict]:
        if "attention_mask" not in kwargs:
            raise ValueError("a decoder layer was called without an attention_mask keyword; this transformers "
                             "version's layer call is not the one the mask is handed to")
        return args, {**kwargs, "attention_mask": mask}

    hooks = [layer.register_forward_pre_hook(hand_in, with_kwargs=True, prepend=True) for layer in lm.model.layers]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


@contextlib.contextmanager
def layer_masks(lm: LlamaForCausalLM, mask: torch.Tensor | None) -> Iterator[None]:
    """Inside the block every decoder layer of ``lm`` receives ``mask`` as its ``attention_mask``
    (:func:`every_layer_gets`); nothing happens for ``mask=None``."""
    if mask is None:
        yield
        return
    with every_layer_gets(lm, mask):
        yield


def ready_cache(lm: LlamaForCausalLM, like: torch.Tensor) -> Any:
    """An empty KV cache for ``lm`` whose layers are already set up for ``like``'s dtype and device.

    transformers >= 4.56 sets a cache layer up at its first update with ``torch.tensor([])`` on the device (a copy
    from host memory); a CUDA-graph capture (:mod:`prismatic_tr.vla.cuda_graph`) passes a cache made here so that
    nothing of the kind runs inside it. transformers 4.40's cache has no such step: a plain ``DynamicCache()``."""
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=lm.config)
    except TypeError:  # transformers < 4.56: no config argument, nothing set up lazily
        return DynamicCache()
    probe = like.new_empty(0)
    for layer in getattr(cache, "layers", ()):
        if not getattr(layer, "is_initialized", True):
            layer.lazy_initialization(probe, probe)
    return cache


def prefill(
    lm: LlamaForCausalLM, inputs_embeds: torch.Tensor, key_mask: torch.Tensor | None = None, cache: Any = None
) -> tuple[torch.Tensor, DecodeState]:
    """Run the prompt once (the output of ``build_multimodal_inputs`` can be passed as is).

    Args:
        inputs_embeds: (B, T, D); key_mask: (B, T) with padding anywhere (bool or 0/1), or None (no padding).
            Padded rows are reordered real tokens first (a stable gather): see the module docstring.
        cache: an empty KV cache to fill (:func:`ready_cache`), or None: transformers makes one.
    Returns:
        logits of each row's last real position (B, V) and the state for :func:`decode_step`.
    """
    b, t = inputs_embeds.shape[:2]
    positions = torch.arange(t, device=inputs_embeds.device).expand(b, t)
    if key_mask is not None:
        key_mask, inputs_embeds = to_right_padding(key_mask.bool(), inputs_embeds)
    with announce_prefill(lm.model, key_mask):
        given = {CACHE_NAME: cache} if cache is not None else {}
        out = lm.model(inputs_embeds=inputs_embeds, attention_mask=None, position_ids=positions, use_cache=True,
                       **given)
    hidden = out.last_hidden_state
    if key_mask is None:
        last, next_position = hidden[:, -1, :], positions[:, -1:] + 1
    else:
        lengths = key_mask.sum(dim=1, keepdim=True)
        # Layers that drop positions (the llm site) drop visual tokens only, all before each row's last real one.
        dropped = t - hidden.shape[1]
        last, next_position = take_along(hidden, lengths - 1 - dropped)[:, 0], lengths
    return lm.lm_head(last), DecodeState(getattr(out, CACHE_NAME), key_mask, next_position)


def decode_step(
    lm: LlamaForCausalLM, token: torch.Tensor, state: DecodeState
) -> tuple[torch.Tensor, DecodeState]:
    """Feed one token per row. token: (B, 1) ids. Returns logits (B, V) and the advanced state."""
    key_mask, mask = None, None
    if state.key_mask is not None:
        key_mask = torch.cat([state.key_mask, torch.ones_like(state.key_mask[:, :1])], dim=1)
        mask = decode_mask(key_mask, lm.lm_head.weight.dtype)
    with layer_masks(lm, mask):
        out = lm.model(
            input_ids=token,
            attention_mask=None,
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
