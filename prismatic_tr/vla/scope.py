"""One top-level call of a VLA, and the hand-offs between its parts that live exactly as long as it.

A reduction before the language model learns something in the backbone or projector (which visual tokens it
kept and where they sat, how many the projector passed on) that the language model needs later in the same
call. That knowledge goes into a :class:`~prismatic_tr.calls.CallRecord`, made fresh for each top-level call and dropped when the
call returns or raises, so nothing crosses from one call to the next: a standalone ``embed_images`` (or a
backbone that raises) followed by a text-only ``generate`` runs exactly as the unreduced model.

The top-level calls are the VLA's ``forward``, ``generate``, ``predict_action`` and OpenVLA-OFT's training pass
``predict_chunk`` (whichever the model has):
while any site is attached they are wrapped on the instance of the innermost model
(:func:`prismatic_tr.models.wrappers.innermost_vla`: under PEFT, DDP or ``torch.compile`` the wrapped model's own
methods, which every wrapper ends up calling), in ``model.__dict__``, removed with the last site, so the model is
exactly as before. Wrapping the methods, not hooking ``__call__``, also scopes the calls that reach
``forward`` directly (PEFT's ``LoraModel`` calls ``self.model.forward``) and OpenVLA-OFT's ``predict_action``,
which runs the backbone and the language model itself. Nested calls (``predict_action`` -> ``generate`` ->
``forward`` per step) share the outermost call's record.

Code that runs the parts by hand (a phase benchmark: backbone, projector, language model) opens a call itself:
``with reduction_call(vla) as call: ...``; ``call.kept`` then tells which tokens the reduction kept. Outside any
call nothing is recorded, so the parts run by hand without one see no positions and no visual count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from prismatic_tr.calls import CallRecord
from prismatic_tr.models.wrappers import innermost_vla

__all__ = ["CallRecord", "CallScope", "current_record", "reduction_call", "release_scope", "scope_of",
           "use_scope"]

SCOPE_ATTR = "_prismatic_tr_scope"
SCOPED_METHODS = ("forward", "generate", "predict_action", "predict_chunk")  # predict_chunk: OFT's training pass


class CallScope:
    """The calls in flight on one model: ``depth`` and the outermost call's :class:`CallRecord` (None between
    calls). ``users``: live sites that need it; ``wrapped``: the names of the instance methods wrapped.

    ``backward``: the record of the last call that ran with gradients enabled, kept until the next call begins and
    read only by its backward pass, which may run parts of the call again (gradient checkpointing recomputes the
    language model's layers, and on transformers 4.40 their rotary embeddings, which need the call's positions).
    A call under ``torch.no_grad()`` leaves none."""

    def __init__(self) -> None:
        self.depth = 0
        self.record: CallRecord | None = None
        self.backward: CallRecord | None = None
        self.users = 0
        self.wrapped: list[str] = []

    def enter(self) -> CallRecord:
        if self.depth == 0:
            self.record, self.backward = CallRecord(), None
        self.depth += 1
        return self.record

    def exit(self) -> None:
        self.depth -= 1
        if self.depth <= 0:
            self.backward = self.record if torch.is_grad_enabled() else None
            self.depth, self.record = 0, None


def scope_of(model: nn.Module) -> CallScope | None:
    """The call scope installed on ``model`` or the model it wraps (PEFT, DDP, compiled), or None."""
    return innermost_vla(model).__dict__.get(SCOPE_ATTR)


def current_record(model: nn.Module) -> CallRecord | None:
    """The record of the top-level call running on ``model`` now, or None outside any call."""
    scope = scope_of(model)
    return scope.record if scope is not None else None


def _scoped(scope: CallScope, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        scope.enter()
        try:
            return method(*args, **kwargs)
        finally:
            scope.exit()

    return call


def use_scope(model: nn.Module) -> CallScope:
    """Install the call scope on ``model`` (first user: wrap its top-level methods) and count one more user.
    ``model``: the innermost VLA (:func:`prismatic_tr.models.wrappers.innermost_vla`)."""
    scope = model.__dict__.get(SCOPE_ATTR)
    if scope is None:
        scope = CallScope()
        for name in SCOPED_METHODS:
            if callable(getattr(type(model), name, None)) and name not in model.__dict__:
                model.__dict__[name] = _scoped(scope, getattr(model, name))
                scope.wrapped.append(name)
        model.__dict__[SCOPE_ATTR] = scope
    scope.users += 1
    return scope


def release_scope(model: nn.Module) -> None:
    """One user fewer; the last one takes the wrappers and the scope off ``model``, leaving it as before."""
    scope = model.__dict__.get(SCOPE_ATTR)
    if scope is None:
        return
    scope.users -= 1
    if scope.users > 0:
        return
    for name in scope.wrapped:
        model.__dict__.pop(name, None)
    model.__dict__.pop(SCOPE_ATTR, None)


@contextmanager
def reduction_call(vla: nn.Module) -> Iterator[CallRecord]:
    """One top-level call opened by hand: ``with reduction_call(vla) as call:`` runs the parts of a step (backbone,
    projector, language model) as one call; ``call.kept`` / ``call.llm_kept`` tell what was kept. Works on a
    wrapped model (PEFT, DDP, compiled). Without a reduction attached it records nothing."""
    scope = scope_of(vla)
    if scope is None:
        yield CallRecord()
        return
    record = scope.enter()
    try:
        yield record
    finally:
        scope.exit()
