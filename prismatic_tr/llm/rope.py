"""Keep the unreduced positions of a reduced visual sequence in a transformers Llama, as undoable hooks.

A reduction before the language model (the ``projector`` and ``vision`` sites) hands it ``K < N`` visual tokens.
:class:`PositionRemap` makes each token attend as if it sat where it sits without reduction: at every fresh call
into the language model it asks ``source()`` which of the ``N`` tokens the current call kept (the caller scopes
that answer to one call, :mod:`prismatic_tr.vla.scope`), and a forward pre-hook on every rotary-embedding module
replaces the position ids it is called with by :func:`prismatic_tr.llm.positions.original_positions` of them.

Only the rotary embedding sees the new ids. Everything else of transformers keeps the compact, gap-free ids it
computed (from the first real token, or the KV cache's length in a decode step): its causal masks, its
cache bookkeeping, and transformers 5's packed-sequence detection, which would read gapped ids as several
sequences packed in one row. The same hook therefore serves a prefill, every decode step of any generation
loop (this package's or transformers' own ``generate``), a training forward and OpenVLA-OFT's parallel pass.

The answer of a fresh call (one with nothing cached) stays active for the decode steps that continue it, in the
record of the call in flight (``CallRecord.positions``, :mod:`prismatic_tr.calls`: the caller's, ``record()``, else
one opened at each fresh call); a fresh call that gets None (text only, or no reduction in this call) runs with the
ordinary positions. Static shapes, no host sync; no parameter, buffer or ``state_dict`` key is added and
``remove()`` restores the model exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from prismatic_tr.calls import Records, RecordSource
from prismatic_tr.llm.calls import decoder, position_ids_argument, read_call, rotary_modules
from prismatic_tr.llm.positions import original_positions


class PositionRemap:
    """Live position keeping on one language model; see the module docstring.

    ``source()``: at a fresh call, ``(kept, num_original)`` of the current call or None, with ``kept`` (B, K)
    where each visual token the language model receives sits among the ``num_original`` unreduced ones (int64,
    or float for merged tokens).
    """

    def __init__(self, lm: nn.Module, source: Callable[[], tuple[torch.Tensor, int] | None],
                 record: RecordSource | None = None) -> None:
        self.model = decoder(lm)
        rotaries = rotary_modules(lm)  # ValueError before anything is attached
        self.source = source
        self.records = Records(record)
        # closures, not bound methods: torch 2.2's dynamo cannot call a bound method as a hook (fullgraph)
        def on_call(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            return self._on_call(module, args, kwargs)

        def on_rotary(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict] | None:
            return self._on_rotary(module, args, kwargs)

        self._hooks = [self.model.register_forward_pre_hook(on_call, with_kwargs=True)]
        self._hooks += [r.register_forward_pre_hook(on_rotary, with_kwargs=True) for r in rotaries]

    def _on_call(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        call = read_call(args, kwargs)
        if call.fresh:
            self.records.begin().positions = self.source()
        elif call.past is None:  # a static cache's length is unknown without a sync: a new answer marks a prefill
            fresh = self.source()
            if fresh is not None:
                self.records.begin().positions = fresh

    def _on_rotary(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict] | None:
        record = self.records.current()
        active = record.positions if record is not None else None
        if active is None:
            return None
        position_ids, put_back = position_ids_argument(args, kwargs)
        return put_back(original_positions(position_ids, *active))

    def remove(self) -> None:
        """Detach every hook; the model is exactly as before. Safe to call twice."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.records.end()

    def __enter__(self) -> PositionRemap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
