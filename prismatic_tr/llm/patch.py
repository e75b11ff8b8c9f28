"""Prune visual tokens inside a transformers ``LlamaForCausalLM`` during a generation prefill, as undoable hooks.

``apply_llm_pruning(lm, layer, keep_ratio, num_visual)`` registers forward pre-hooks on ``lm`` and ``lm.model``
(to read each call, :mod:`prismatic_tr.llm.calls`) and on every decoder layer from ``layer`` on.

Which calls are pruned: a *generation prefill* only, i.e. a fresh call with visual tokens (``num_visual()``
gives their count K) that this package's generation announced, or whose caller asked for a cache
(``use_cache=True`` or a cache object, as transformers' ``generate`` does). A plain forward (training with labels,
teacher forcing, OpenVLA-OFT's parallel pass) passes ``use_cache=None`` and runs unpruned, so it equals the
unreduced model. Refused with ``ValueError``: labels together with a requested cache, gradient checkpointing
in training mode (the layers' arguments then arrive positionally), a static KV cache (its length is on the
device), a 4-D mask handed in by the caller, a 2-D mask reaching the layers (FlashAttention-2 on
transformers 4.40 with padding), and decoder layers whose keyword arguments are not the ones expected.

In a pruned prefill:

* at layer ``layer`` the visual tokens are scored with that layer's own projections (queries of each row's
  last ``num_queries`` real positions against the visual keys, rotary embedding applied; see :mod:`.pruning`),
  the best ``num_kept(K, keep_ratio)`` are kept, and the hidden states are gathered to the shorter sequence.
  Where the visual tokens are comes from the layout: one after each row's first real token, read from the
  announced key mask or the 2-D attention mask (never from position ids);
* at every pruned layer the per-position arguments transformers hands the layer (position ids, rotary
  embeddings, a 4-D mask, cache positions) are gathered the same way, so attention stays SDPA with the
  causal path or the mask transformers made, the kept tokens keep their position ids, and the KV cache of these
  layers holds the kept positions only. Where rotary embeddings are handed in (transformers 5), the layers'
  position ids only tell FlashAttention-2 where packed sequences start; they are made gap-free there;
* in the decode steps after it, a 4-D mask, if any, loses the columns of the dropped tokens.

Layers before ``layer`` see the whole sequence and keep it in their cache. Nothing is copied from
transformers: the hooks only rewrite the layers' inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from prismatic_tr.calls import CallRecord, Records, RecordSource
from prismatic_tr.llm.calls import announced_prefill, decoder, read_call
from prismatic_tr.llm.pruning import (
    prune_index,
    query_index,
    select_visual,
    visual_token_scores,
    visual_window,
)
from prismatic_tr.reducers.config import check_fraction
from prismatic_tr.reducers.tensor_ops import take_along

_PER_POSITION = ("position_ids", "cache_position")
# Keyword arguments a decoder layer must receive for the hooks to rewrite them (4.40 and 5.x name them so).
_LAYER_KWARGS = ("attention_mask", "position_ids")


@dataclass
class LLMPruningConfig:
    """Where and how much. ``layer``: prune before decoder layer ``layer`` (1 <= layer < num_layers: at least
    one layer sees every token); ``keep_ratio``: fraction of visual tokens kept, in (0, 1];
    ``num_queries``: last prompt positions whose attention scores the visual tokens (>= 1)."""

    layer: int
    keep_ratio: float
    num_queries: int = 4

    def check(self, num_layers: int) -> None:
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or not 1 <= self.layer < num_layers:
            raise ValueError(f"layer={self.layer!r} is not allowed; use an integer in [1, {num_layers - 1}] "
                             f"(the language model has {num_layers} layers)")
        check_fraction("keep_ratio", self.keep_ratio, what="the fraction of visual tokens kept")
        if isinstance(self.num_queries, bool) or not isinstance(self.num_queries, int) or self.num_queries < 1:
            raise ValueError(f"num_queries={self.num_queries!r} is not allowed; use an integer >= 1")


@dataclass
class PrunedSequence:
    """The sequence in flight, kept in the call's record (``CallRecord.pruning``, :mod:`prismatic_tr.calls`):
    ``mode`` "prefill" (pruning this call), "decode" (continuing a pruned one) or None.

    select: (K, start (B,), last (B,)) until the first pruned layer chooses; index (B, T'): positions kept;
    seq_len: T of the prefill; kept (B, n): visual tokens kept.
    """

    mode: str | None = None
    select: tuple[int, torch.Tensor, torch.Tensor] | None = None
    index: torch.Tensor | None = None
    seq_len: int = 0
    kept: torch.Tensor | None = None


def _gather_mask(mask: torch.Tensor, rows: torch.Tensor | None, cols: torch.Tensor) -> torch.Tensor:
    """A (B, 1, Q, Kv) mask: rows (B, Q') or None (keep all), columns (B, Kv')."""
    mask = mask.expand(cols.shape[0], *mask.shape[1:])
    if rows is not None:
        mask = take_along(mask, rows, dim=2)
    return take_along(mask, cols, dim=3)


class LLMPruningHandle:
    """Live pruning on one language model; ``remove()`` (or leaving a ``with`` block) restores it exactly.

    ``num_visual()``: K of a fresh call (None: leave it alone); ``on_kept(kept)``, if given, hears the (B, n)
    visual tokens each pruned prefill keeps. The pruned sequence (:class:`PrunedSequence`) lives in the record of
    the call in flight: the caller's (``record()``), else one opened at each fresh call and kept for the decode
    steps that continue it. ``force_kept`` (B, n) visual indices replace the scoring (tests: recomputation with the
    same choice), and ``prune_uncached`` prunes plain forwards too (tests only).
    """

    def __init__(self, lm: nn.Module, config: LLMPruningConfig, num_visual: Callable[[], int | None],
                 on_kept: Callable[[torch.Tensor], None] | None = None, record: RecordSource | None = None) -> None:
        self.model = decoder(lm)
        layers = self.model.layers
        config.check(len(layers))
        self.lm, self.config, self.num_visual, self.on_kept = lm, config, num_visual, on_kept
        self.records = Records(record)
        self.force_kept: torch.Tensor | None = None
        self.prune_uncached = False
        # closures, not bound methods: torch 2.2's dynamo cannot call a bound method as a hook (fullgraph)
        def on_lm_call(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            return self._on_lm_call(module, args, kwargs)

        def on_call(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            return self._on_call(module, args, kwargs)

        self._hooks = [lm.register_forward_pre_hook(on_lm_call, with_kwargs=True),
                       self.model.register_forward_pre_hook(on_call, with_kwargs=True)]
        self._hooks += [layers[i].register_forward_pre_hook(self._hook(i), with_kwargs=True)
                        for i in range(config.layer, len(layers))]

    @property
    def sequence(self) -> PrunedSequence | None:
        """The sequence of the call in flight (None outside one, or before its first fresh call)."""
        record = self.records.current()
        return record.pruning if record is not None else None

    # --- per call ---
    def _on_lm_call(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        asks = kwargs.get("use_cache") is True or any(kwargs.get(k) is not None for k in ("cache", "past_key_values"))
        if kwargs.get("labels") is not None and asks:
            raise ValueError("the llm site prunes generation prefills only: a forward with labels and a KV cache "
                             "(use_cache=True or past_key_values) would compute the loss on a pruned sequence; "
                             "drop use_cache for training, or remove the llm site")

    def _on_call(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        call = read_call(args, kwargs)
        if call.past is None:
            raise ValueError(f"the llm site needs a dynamic KV cache; got {type(call.cache).__name__}, whose length "
                             "cannot be read without a host sync")
        if not call.fresh:
            seq = self.sequence
            if seq is not None:
                seq.mode = "decode" if seq.index is not None else None
            return
        record: CallRecord = self.records.begin()
        record.pruning = PrunedSequence()
        k = self.num_visual()
        prefill = announced_prefill(self.model)
        if k is None or not (prefill is not None or call.asks_for_cache or self.prune_uncached):
            return
        if self.model.gradient_checkpointing and self.model.training:
            raise ValueError("the llm site cannot prune with gradient checkpointing in training mode (the layers' "
                             "arguments arrive positionally); call .eval() for generation")
        mask = prefill.key_mask if prefill is not None else call.attention_mask
        if mask is not None and mask.dim() != 2:
            raise ValueError(f"the llm site reads the visual window from a 2-D key mask; got a {mask.dim()}-D "
                             "attention_mask")
        device = self.model.layers[0].input_layernorm.weight.device
        start, last = visual_window(mask, call.batch, call.length, device)
        record.pruning = PrunedSequence("prefill", (k, start, last), seq_len=call.length)

    def _hook(self, index: int) -> Callable[..., Any]:
        first = index == self.config.layer

        def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
            seq = self.sequence
            if seq is None or seq.mode is None:
                return None
            missing = [k for k in _LAYER_KWARGS if k not in kwargs]
            if missing:
                raise ValueError(f"decoder layer {index} was called without the keyword arguments {missing}; the "
                                 "llm site rewrites them and does not know this transformers version's layer call")
            if seq.mode == "decode":
                return self._decode_inputs(seq, args, kwargs)
            hidden = args[0] if args else kwargs["hidden_states"]
            if first:
                self._select(seq, module, hidden, kwargs)
            return self._prefill_inputs(seq, args, kwargs, hidden, first)

        return hook

    def _select(self, seq: PrunedSequence, layer: nn.Module, hidden: torch.Tensor, kwargs: dict) -> None:
        """At the pruning layer of a pruned prefill: score, choose, and remember the gather index."""
        k, start, last = seq.select
        kept = self.force_kept if self.force_kept is not None else select_visual(
            self._scores(layer, hidden, kwargs["position_ids"], start, last, k), self.config.keep_ratio)
        seq.index, seq.kept = prune_index(hidden.shape[1], start, k, kept), kept
        if self.on_kept is not None:
            self.on_kept(kept)

    def _scores(self, layer: nn.Module, hidden: torch.Tensor, pos: torch.Tensor, start: torch.Tensor,
                last: torch.Tensor, k: int) -> torch.Tensor:
        """(B, K) attention of each row's last prompt positions over its visual tokens, with the layer's weights."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        cfg, attn = self.lm.config, layer.self_attn
        b, t, _ = hidden.shape
        m = max(1, min(self.config.num_queries, t - k - 1))
        heads, kv_heads, d = cfg.num_attention_heads, cfg.num_key_value_heads, attn.head_dim
        q_idx = query_index(start, last, k, m)
        v_idx = start[:, None] + torch.arange(k, device=hidden.device)
        h = layer.input_layernorm(hidden)
        q = attn.q_proj(take_along(h, q_idx)).view(b, m, heads, d).transpose(1, 2)
        key = attn.k_proj(take_along(h, v_idx)).view(b, k, kv_heads, d).transpose(1, 2)
        rot = getattr(self.model, "rotary_emb", None) or attn.rotary_emb
        cos, sin = rot(hidden, torch.cat([take_along(pos, q_idx), take_along(pos, v_idx)], dim=1))
        q = apply_rotary_pos_emb(q, q, cos[:, :m], sin[:, :m])[0]
        key = apply_rotary_pos_emb(key, key, cos[:, m:], sin[:, m:])[0]
        return visual_token_scores(q, key.repeat_interleave(heads // kv_heads, dim=1))

    def _prefill_inputs(self, seq: PrunedSequence, args: tuple, kwargs: dict, hidden: torch.Tensor,
                        first: bool) -> tuple[tuple, dict]:
        index, t, kw = seq.index, seq.seq_len, dict(kwargs)
        for name in _PER_POSITION:
            value = kw.get(name)
            if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[-1] == t:
                kw[name] = take_along(value, index)
            elif isinstance(value, torch.Tensor) and value.dim() == 1 and value.shape[0] == t:
                kw[name] = value[: index.shape[1]]  # static-cache bookkeeping only; the dynamic cache ignores it
        emb = kw.get("position_embeddings")
        if emb is not None and emb[0].shape[1] == t:
            kw["position_embeddings"] = tuple(take_along(e, index) for e in emb)
            # rotary comes in: the ids only mark packed sequences for FlashAttention-2, so no gaps there
            kw["position_ids"] = torch.arange(index.shape[1], device=index.device).expand(index.shape[0], -1)
        mask = kw.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2:
            raise ValueError("the llm site got a 2-D attention mask at the decoder layers (FlashAttention-2 on "
                             "transformers 4 with a padded batch); use SDPA or an unpadded batch")
        if isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.shape[-1] >= t:
            kw["attention_mask"] = _gather_mask(mask[..., :t], index, index)
        if first:
            pruned = take_along(hidden, index)
            args = (pruned, *args[1:]) if args else args
            if not args:
                kw["hidden_states"] = pruned
        return args, kw

    def _decode_inputs(self, seq: PrunedSequence, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        mask = kwargs.get("attention_mask")
        if not (isinstance(mask, torch.Tensor) and mask.dim() == 4):
            return None
        t = seq.seq_len
        new = torch.arange(t, mask.shape[-1], device=mask.device).expand(seq.index.shape[0], -1)
        kw = dict(kwargs)
        kw["attention_mask"] = _gather_mask(mask, None, torch.cat([seq.index, new], dim=1))
        return args, kw

    def remove(self) -> None:
        """Detach every hook; the model is exactly as before. Safe to call twice."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.records.end()

    def __enter__(self) -> LLMPruningHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def apply_llm_pruning(
    lm: nn.Module, layer: int, keep_ratio: float, num_visual: Callable[[], int | None], num_queries: int = 4,
    on_kept: Callable[[torch.Tensor], None] | None = None, record: RecordSource | None = None,
) -> LLMPruningHandle:
    """Prune visual tokens before decoder layer ``layer`` of ``lm`` (a ``LlamaForCausalLM``) in generation
    prefills; ``num_visual()`` gives K of the current call (None: leave the call alone); ``on_kept(kept)`` hears
    what each pruned prefill keeps; ``record()``: the record of the caller's call in flight, which the pruned
    sequence goes into (default: one per fresh call). Bad settings raise ``ValueError`` before anything is attached."""
    decoder(lm)
    return LLMPruningHandle(lm, LLMPruningConfig(layer, keep_ratio, num_queries), num_visual, on_kept, record)
