"""What one call into a transformers Llama is, read from the call's own arguments (a forward pre-hook on
``lm.model``), on transformers 4.40 and 5.x alike.

A call is *fresh* when no position is cached before it (no cache, or an empty dynamic one): a prefill, a
training or teacher-forced forward, OpenVLA-OFT's one parallel pass. Otherwise it continues a cached sequence
(a decode step). Whether the caller asked for a cache is read from what it passed (``use_cache=True``, or a
cache object), never from the config default that transformers applies to ``use_cache=None``.

A generation prefill of this package announces itself (:func:`announce_prefill`) with the key mask of its
prompt, since it hands transformers no mask at all (rows are right-padded: real tokens first).

Only shapes and Python objects are read here: no tensor value, no host sync.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

# The KV cache's keyword on LlamaModel.forward: ``cache`` from transformers 5.24 on, ``past_key_values`` before.
_CACHE_KWARGS = ("cache", "past_key_values")
PREFILL_ATTR = "_prismatic_tr_prefill"


def past_length(cache: Any) -> int | None:
    """Positions held by ``cache``: 0 for None or an empty cache; None when the length cannot be read from
    shapes (a static cache counts its filled slots on the device: reading that is a host sync)."""
    if cache is None:
        return 0
    if isinstance(cache, (tuple, list)):  # transformers 4's legacy format: ((k, v), ...) per layer
        return int(cache[0][0].shape[-2]) if len(cache) and len(cache[0]) else 0
    from transformers import DynamicCache

    if isinstance(cache, DynamicCache):
        return int(cache.get_seq_length())
    return None


@dataclass  # not frozen: torch 2.2's dynamo cannot build a frozen dataclass inside a compiled hook
class LlamaCall:
    """One ``LlamaModel`` call. ``batch`` x ``length`` positions fed; ``past``: positions cached before (None:
    unknown, see :func:`past_length`); ``use_cache`` as passed (None when not passed); ``cache`` the cache object
    passed, if any; ``attention_mask`` as passed (2-D (B, past + length), 4-D, or None)."""

    batch: int
    length: int
    past: int | None
    use_cache: bool | None
    cache: Any
    attention_mask: torch.Tensor | None

    @property
    def fresh(self) -> bool:
        """No position is cached before this call."""
        return self.past == 0

    @property
    def asks_for_cache(self) -> bool:
        """The caller passed ``use_cache=True`` or a cache object (a generation), not the config's default."""
        return self.use_cache is True or self.cache is not None


def read_call(args: tuple, kwargs: dict[str, Any]) -> LlamaCall:
    """The :class:`LlamaCall` of ``LlamaModel.forward(*args, **kwargs)``."""
    embeds = kwargs.get("inputs_embeds")
    ids = kwargs.get("input_ids", args[0] if args else None)
    fed = embeds if embeds is not None else ids
    if fed is None:
        raise ValueError("a language-model call without input_ids or inputs_embeds")
    cache = None
    for name in _CACHE_KWARGS:  # a plain loop: torch 2.2's dynamo cannot trace next(generator, default)
        if kwargs.get(name) is not None:
            cache = kwargs[name]
    return LlamaCall(int(fed.shape[0]), int(fed.shape[1]), past_length(cache), kwargs.get("use_cache"), cache,
                     kwargs.get("attention_mask"))


@dataclass(frozen=True)
class Prefill:
    """A generation prefill as its caller announces it: ``key_mask`` (B, T) bool with every row's real tokens
    first (BOS at 0), or None when no row is padded."""

    key_mask: torch.Tensor | None


@contextlib.contextmanager
def announce_prefill(model: nn.Module, key_mask: torch.Tensor | None) -> Iterator[None]:
    """Tell hooks on ``model`` (a ``LlamaModel``) that the calls inside the block are a generation prefill."""
    object.__setattr__(model, PREFILL_ATTR, Prefill(key_mask))  # a plain attribute: no submodule, no state
    try:
        yield
    finally:
        object.__delattr__(model, PREFILL_ATTR)


def announced_prefill(model: nn.Module) -> Prefill | None:
    """The prefill announced on ``model`` for the call in progress, or None."""
    return getattr(model, PREFILL_ATTR, None)  # not model.__dict__: torch 2.2's dynamo cannot read that


def decoder(lm: nn.Module) -> nn.Module:
    """``lm.model`` of a ``LlamaForCausalLM`` (the module whose calls are read); ValueError if there is none."""
    model = getattr(lm, "model", None)
    if model is None or not isinstance(getattr(model, "layers", None), nn.ModuleList):
        raise ValueError(f"{type(lm).__name__} has no model.layers; expected a transformers LlamaForCausalLM")
    return model


def rotary_modules(lm: nn.Module) -> list[nn.Module]:
    """Every rotary-embedding module of ``lm`` (transformers 5: one on ``lm.model``; 4.40: one per attention),
    each called as ``rotary(x, position_ids)``. ValueError when there is none or one takes no position ids."""
    found = [m for m in decoder(lm).modules() if "RotaryEmbedding" in type(m).__name__]
    if not found:
        raise ValueError(f"{type(lm).__name__} has no rotary embedding module; keeping positions needs a Llama")
    for m in found:
        if "position_ids" not in inspect.signature(m.forward).parameters:
            raise ValueError(f"{type(m).__name__}.forward takes no position_ids on this transformers version; "
                             "positions='original' needs rotary embeddings computed from position ids")
    return found


def position_ids_argument(args: tuple, kwargs: dict[str, Any]) -> tuple[torch.Tensor, Any]:
    """The ``position_ids`` of a rotary call ``(x, position_ids)`` and a function that puts a replacement back
    as the hook's ``(args, kwargs)`` return value."""
    if "position_ids" in kwargs:
        return kwargs["position_ids"], lambda new: (args, {**kwargs, "position_ids": new})
    if len(args) < 2:
        raise ValueError("a rotary-embedding call without position_ids; cannot keep the original positions")
    return args[1], lambda new: ((args[0], new, *args[2:]), kwargs)
