"""Proportional attention for visual tokens that stand for several patches, as undoable hooks on a transformers
Llama.

A reduction that merges (``diverse_merge``) hands the language model K visual tokens, token j the mean of n_j of
the N unreduced ones. Proportional attention (ToMe, Bolya et al., ICLR 2023: ``softmax(q k^T / sqrt(d) + log n)``)
makes every query weigh token j as it would weigh n_j copies of it: a merged region draws the attention its
patches drew together, and the visual tokens' share of attention against the text's stays what it was without the
cut. Written here from the paper's formula; no code taken.

How: at every call into the language model (a prefill, each decode step, OpenVLA-OFT's one pass, a training
forward) a forward pre-hook on ``lm.model`` notes the call's extent (positions cached before it, positions fed) in
the record of the call in flight (:mod:`prismatic_tr.calls`), and a forward pre-hook on every decoder layer, run
after any hook that hands the layer its mask (:func:`prismatic_tr.models.generation.every_layer_gets`, which is
prepended), adds ``log n_j`` at the visual keys' columns to the layer's additive mask; where the layer would attend
causally with no mask, it hands it the causal mask with those columns added. The sum is made once per call, at its
first layer, and handed to every later layer that gets the same mask (``CallRecord.lm_call``). The sizes are the
record's (``CallRecord.sizes``, handed on by the site with the kept positions); a call without them runs untouched. The
visual tokens sit right after BOS (key columns 1 .. K), as in every prompt of this package and of OpenVLA's and
OpenVLA-OFT's code. Static shapes, no host sync; no parameter, buffer or ``state_dict`` key is added and
``remove()`` restores the model exactly.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.calls import Records, RecordSource, SizedCall
from prismatic_tr.llm.calls import decoder, read_call


def size_columns(sizes: torch.Tensor, num_keys: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, K) sizes of the visual tokens at key columns 1 .. K -> (B, 1, 1, num_keys) additive bias: ``log`` of
    each size there, 0 at every other key. ValueError when the K tokens do not fit after BOS."""
    b, k = sizes.shape
    if num_keys < k + 1:
        raise ValueError(f"{k} visual tokens after BOS need at least {k + 1} keys; this attention has {num_keys}")
    logs = sizes.to(dtype).clamp_min(1).log()
    cols = torch.cat([logs.new_zeros(b, 1), logs, logs.new_zeros(b, num_keys - 1 - k)], dim=1)
    return cols[:, None, None, :]


def causal_bias(columns: torch.Tensor, past: int, length: int) -> torch.Tensor:
    """(B, 1, 1, T_k) column bias -> (B, 1, length, T_k) additive mask of a causal call of ``length`` queries after
    ``past`` cached positions (T_k = past + length): the columns where a query may attend, dtype's minimum after it."""
    keys = columns.shape[-1]
    query = torch.arange(length, device=columns.device)[:, None] + past
    allowed = torch.arange(keys, device=columns.device)[None, :] <= query        # (length, T_k)
    bias = columns.expand(columns.shape[0], 1, length, keys)
    return bias.masked_fill(~allowed, torch.finfo(columns.dtype).min)


class ProportionalAttention:
    """Live proportional attention on one language model; see the module docstring.

    ``record()``: the record of the call in flight (its ``sizes``, (B, K) float, are the visual tokens'), or None.
    """

    def __init__(self, lm: nn.Module, record: RecordSource) -> None:
        self.model = decoder(lm)  # ValueError before anything is attached
        self.records = Records(record)

        # closures, not bound methods: torch 2.2's dynamo cannot call a bound method as a hook (fullgraph)
        def on_call(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            return self._on_call(module, args, kwargs)

        def on_layer(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict] | None:
            return self._on_layer(module, args, kwargs)

        self._hooks = [self.model.register_forward_pre_hook(on_call, with_kwargs=True)]
        self._hooks += [layer.register_forward_pre_hook(on_layer, with_kwargs=True) for layer in self.model.layers]

    def _on_call(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        record = self.records.current()
        if record is None or record.sizes is None:
            return
        call = read_call(args, kwargs)
        record.lm_call = SizedCall((call.past, call.length), None, None)

    def _on_layer(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict] | None:
        record = self.records.current()
        if record is None or record.sizes is None:
            return None
        positional = "attention_mask" not in kwargs and len(args) > 1  # transformers 4.40's checkpointed call
        mask = args[1] if positional else kwargs.get("attention_mask")
        state = record.lm_call  # every layer of a call gets the same mask: the first one's sum serves them all
        if state.biased is not None and state.mask is mask:
            new = state.biased
        elif mask is not None:
            if mask.dim() != 4:
                raise ValueError(f"a decoder layer got a {mask.dim()}-D attention mask; proportional attention "
                                 "adds to the 4-D additive one")
            new = mask + size_columns(record.sizes, mask.shape[-1], mask.dtype)
        else:
            past, length = state.extent
            if past is None:
                raise ValueError("proportional attention needs the number of cached positions, which a static KV "
                                 "cache does not tell without a host sync; use a dynamic cache or hand the layers "
                                 "a mask")
            hidden = args[0] if args else kwargs["hidden_states"]
            new = causal_bias(size_columns(record.sizes, past + length, hidden.dtype), past, length)
        record.lm_call = SizedCall(state.extent, mask, new)
        if positional:
            return (args[0], new, *args[2:]), kwargs
        return args, {**kwargs, "attention_mask": new}

    def remove(self) -> None:
        """Detach every hook; the model is exactly as before. Safe to call twice."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.records.end()
