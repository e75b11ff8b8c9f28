"""Prune visual tokens inside a transformers ``LlamaForCausalLM`` during the prefill, as undoable pre-hooks.

``apply_llm_pruning(lm, layer, keep_ratio, num_visual)`` registers a forward pre-hook on every decoder layer
from ``layer`` on. In a cached prefill (``use_cache=True``, more than one position, ``num_visual()`` known):

* at layer ``layer`` the visual tokens are scored with that layer's own projections (queries of the last
  ``num_queries`` positions against the visual keys, rotary embedding applied; see :mod:`.pruning`), the best
  ``num_kept(K, keep_ratio)`` are kept, and the hidden states are gathered to the shorter sequence;
* at every pruned layer the per-position arguments transformers hands the layer (position ids, rotary
  embeddings, a 4-D mask, cache positions) are gathered the same way, so attention stays SDPA with the
  causal path or the mask transformers made, and the KV cache of these layers holds the kept positions only;
* in the decode steps after it (one position), a 4-D mask, if any, loses the columns of the dropped tokens.

Layers before ``layer`` see the whole sequence and keep it in their cache. Nothing is copied from
transformers: the hooks only rewrite the layers' inputs. Both the 4.40 (``past_key_value``, rotary inside the
attention) and the 5.x (``position_embeddings`` handed in) layer signatures are handled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from prismatic_tr.llm.pruning import prune_index, select_visual, visual_start, visual_token_scores

_PER_POSITION = ("position_ids", "cache_position")


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
        ratio = self.keep_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 < ratio <= 1.0:
            raise ValueError(f"keep_ratio={ratio!r} is not allowed; it is the fraction of visual tokens kept, in (0, 1]")
        if isinstance(self.num_queries, bool) or not isinstance(self.num_queries, int) or self.num_queries < 1:
            raise ValueError(f"num_queries={self.num_queries!r} is not allowed; use an integer >= 1")


@dataclass
class _State:
    """What the current prefill decided: gather index (B, T'), full prompt length T, kept visual ids (B, n)."""

    index: torch.Tensor | None = None
    seq_len: int = 0
    kept: torch.Tensor | None = None


def _gather_rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """t (B, T, ...) or (1, T, ...) -> (B, T', ...) along dim 1."""
    t = t.expand(index.shape[0], *t.shape[1:])
    idx = index.view(*index.shape, *([1] * (t.dim() - 2))).expand(*index.shape, *t.shape[2:])
    return t.gather(1, idx)


def _gather_mask(mask: torch.Tensor, rows: torch.Tensor | None, cols: torch.Tensor) -> torch.Tensor:
    """A (B, 1, Q, Kv) mask: rows (B, Q') or None (keep all), columns (B, Kv')."""
    mask = mask.expand(cols.shape[0], *mask.shape[1:])
    if rows is not None:
        mask = mask.gather(2, rows[:, None, :, None].expand(-1, mask.shape[1], -1, mask.shape[3]))
    return mask.gather(3, cols[:, None, None, :].expand(-1, mask.shape[1], mask.shape[2], -1))


class LLMPruningHandle:
    """Live pruning on one language model; ``remove()`` (or leaving a ``with`` block) restores it exactly.

    ``force_kept`` (B, n) visual indices replace the scoring (tests: recomputation with the same choice), and
    ``prune_uncached`` prunes forwards without a cache too.
    """

    def __init__(self, lm: nn.Module, config: LLMPruningConfig, num_visual: Callable[[], int | None]) -> None:
        layers = lm.model.layers
        config.check(len(layers))
        self.lm, self.config, self.num_visual = lm, config, num_visual
        self.state = _State()
        self.force_kept: torch.Tensor | None = None
        self.prune_uncached = False
        self._hooks = [layers[i].register_forward_pre_hook(self._hook(i), with_kwargs=True)
                       for i in range(config.layer, len(layers))]

    @property
    def last_kept(self) -> torch.Tensor | None:
        """(B, n) indices of the visual tokens the last prefill kept, or None."""
        return self.state.kept

    def _hook(self, index: int) -> Callable[..., Any]:
        first = index == self.config.layer

        def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
            hidden = args[0] if args else kwargs["hidden_states"]
            if hidden.shape[1] == 1:
                return self._decode_inputs(args, kwargs)
            if first and not self._select(module, hidden, kwargs):
                return None
            if self.state.index is None or kwargs.get("position_ids") is None:
                return None
            return self._prefill_inputs(args, kwargs, hidden, first)

        return hook

    def _select(self, layer: nn.Module, hidden: torch.Tensor, kwargs: dict) -> bool:
        """At the pruning layer of a cached prefill: score, choose, and remember the gather index."""
        self.state = _State()
        k = self.num_visual()
        pos = kwargs.get("position_ids")
        if k is None or pos is None or not (kwargs.get("use_cache") or self.prune_uncached):
            return False
        pos = pos.expand(hidden.shape[0], -1)
        start = visual_start(pos)
        kept = self.force_kept if self.force_kept is not None else select_visual(
            self._scores(layer, hidden, pos, start, k), self.config.keep_ratio)
        self.state = _State(prune_index(hidden.shape[1], start, k, kept), hidden.shape[1], kept)
        return True

    def _scores(self, layer: nn.Module, hidden: torch.Tensor, pos: torch.Tensor, start: torch.Tensor,
                k: int) -> torch.Tensor:
        """(B, K) attention of the last prompt positions over the visual tokens, with the layer's weights."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        cfg, attn = self.lm.config, layer.self_attn
        b, t, _ = hidden.shape
        m = min(self.config.num_queries, t - k - 1)
        heads, kv_heads, d = cfg.num_attention_heads, cfg.num_key_value_heads, attn.head_dim
        q_idx = torch.arange(t - m, t, device=hidden.device).expand(b, m)
        v_idx = start[:, None] + torch.arange(k, device=hidden.device)
        h = layer.input_layernorm(hidden)
        q = attn.q_proj(_gather_rows(h, q_idx)).view(b, m, heads, d).transpose(1, 2)
        key = attn.k_proj(_gather_rows(h, v_idx)).view(b, k, kv_heads, d).transpose(1, 2)
        rot = getattr(self.lm.model, "rotary_emb", None) or attn.rotary_emb
        cos, sin = rot(hidden, torch.cat([_gather_rows(pos, q_idx), _gather_rows(pos, v_idx)], dim=1))
        q = apply_rotary_pos_emb(q, q, cos[:, :m], sin[:, :m])[0]
        key = apply_rotary_pos_emb(key, key, cos[:, m:], sin[:, m:])[0]
        return visual_token_scores(q, key.repeat_interleave(heads // kv_heads, dim=1))

    def _prefill_inputs(self, args: tuple, kwargs: dict, hidden: torch.Tensor, first: bool) -> tuple[tuple, dict]:
        index, kw = self.state.index, dict(kwargs)
        for name in _PER_POSITION:
            value = kw.get(name)
            if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[-1] == self.state.seq_len:
                kw[name] = _gather_rows(value, index)
            elif isinstance(value, torch.Tensor) and value.dim() == 1 and value.shape[0] == self.state.seq_len:
                kw[name] = value[: index.shape[1]]  # static-cache bookkeeping only; the dynamic cache ignores it
        emb = kw.get("position_embeddings")
        if emb is not None and emb[0].shape[1] == self.state.seq_len:
            kw["position_embeddings"] = tuple(_gather_rows(e, index) for e in emb)
        mask = kw.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.shape[-1] >= self.state.seq_len:
            kw["attention_mask"] = _gather_mask(mask[..., : self.state.seq_len], index, index)
        if first:
            pruned = _gather_rows(hidden, index)
            args = (pruned, *args[1:]) if args else args
            if not args:
                kw["hidden_states"] = pruned
        return args, kw

    def _decode_inputs(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        mask = kwargs.get("attention_mask")
        if self.state.index is None or not (isinstance(mask, torch.Tensor) and mask.dim() == 4):
            return None
        t = self.state.seq_len
        new = torch.arange(t, mask.shape[-1], device=mask.device).expand(self.state.index.shape[0], -1)
        kw = dict(kwargs)
        kw["attention_mask"] = _gather_mask(mask, None, torch.cat([self.state.index, new], dim=1))
        return args, kw

    def remove(self) -> None:
        """Detach every hook; the model is exactly as before. Safe to call twice."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.state = _State()

    def __enter__(self) -> LLMPruningHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def apply_llm_pruning(
    lm: nn.Module, layer: int, keep_ratio: float, num_visual: Callable[[], int | None], num_queries: int = 4
) -> LLMPruningHandle:
    """Prune visual tokens before decoder layer ``layer`` of ``lm`` (a ``LlamaForCausalLM``) in cached
    prefills; ``num_visual()`` gives K of the current call (None: leave the call alone). Bad settings raise
    ``ValueError`` before anything is attached."""
    if not hasattr(getattr(lm, "model", None), "layers"):
        raise ValueError(f"{type(lm).__name__} has no model.layers; expected a transformers LlamaForCausalLM")
    return LLMPruningHandle(lm, LLMPruningConfig(layer, keep_ratio, num_queries), num_visual)
