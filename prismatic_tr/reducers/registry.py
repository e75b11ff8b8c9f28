"""Registry of reduction strategies, filled by decorators in the strategy modules.

It imports nothing of the package at run time (the config types below are annotations only), so that the
config can ask it which methods exist and the strategies can register into it without an import circle. The
built-in strategies are registered by ``prismatic_tr.reducers``' ``__init__``, which Python runs before any of
its modules, this one included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput


class ScoreFn(Protocol):
    """``score(patches (B, N, D), cfg, rng) -> (B, N)``: one score per token, higher is kept first."""

    def __call__(
        self, patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None
    ) -> torch.Tensor: ...


class GroupsFn(Protocol):
    """``groups(patches (B, N, D), k) -> (B, k) representatives, ascending, and (B, N) group of each patch``."""

    def __call__(self, patches: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]: ...


class ReduceFn(Protocol):
    """``reduce(patches (B, N, D), cfg, rng)``; ``rng`` is None, a key tensor (``uses_key``) or a
    ``torch.Generator`` (``uses_generator``)."""

    def __call__(
        self, patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None
    ) -> ReductionOutput: ...


@dataclass(frozen=True)
class Strategy:
    """A named strategy: ``reduce`` maps patches (B, N, D) to (B, K, D); ``count`` gives K from N.

    Randomness: ``uses_key`` strategies get a fresh 0-d int64 key tensor per call
    (:class:`~prismatic_tr.reducers.random_stream.KeyStream`; compiles with ``fullgraph=True``);
    ``uses_generator`` strategies get a seeded ``torch.Generator`` (kept for compatibility: a Generator
    argument does not compile with ``fullgraph=True``).

    ``score`` (selecting strategies): the per-token scores ``reduce`` keeps the top K of (a merging strategy: the
    K representatives the other tokens merge into). With it, a selecting strategy's
    :class:`~prismatic_tr.reducers.TokenReducer` gathers prefix and kept tokens in one ``gather`` from the
    unsliced input instead of slicing, reducing and concatenating (torch 2.2's inductor miscompiles a
    gather from a sliced tensor that feeds a ``cat``: "index out of bounds" aborts the process).

    ``merges``: each output token stands for several input tokens and ``reduce`` says how many
    (``ReductionOutput.sizes``); a site before a language model then weighs them so in attention.

    ``groups`` (a merging strategy that makes its own groups, no ``score``): ``groups(patches (B, N, D), k) ->
    (representatives (B, k) ascending, group of each patch (B, N) in 0 .. k - 1)``, what ``reduce`` averages; the
    ``vision`` site makes its groups with it inside the towers.
    """

    name: str
    reduce: ReduceFn
    count: Callable[[int, ReducerConfig], int]
    uses_generator: bool = False
    uses_key: bool = False
    score: ScoreFn | None = None
    merges: bool = False
    groups: GroupsFn | None = None


_STRATEGIES: dict[str, Strategy] = {}


def register_strategy(
    name: str, count: Callable[[int, ReducerConfig], int], uses_generator: bool = False, uses_key: bool = False,
    score: ScoreFn | None = None, merges: bool = False, groups: GroupsFn | None = None,
) -> Callable[[ReduceFn], ReduceFn]:
    """Decorator: register ``fn`` as the reduce function of strategy ``name`` (see :class:`Strategy`)."""
    if uses_generator and uses_key:
        raise ValueError(f"strategy {name!r}: choose one of uses_generator / uses_key, not both")
    if groups is not None and (score is not None or not merges):
        raise ValueError(f"strategy {name!r}: groups is for a merging strategy without a score")

    def deco(fn: ReduceFn) -> ReduceFn:
        if name in _STRATEGIES:
            raise ValueError(f"reduction strategy {name!r} is already registered")
        _STRATEGIES[name] = Strategy(name, fn, count, uses_generator, uses_key, score, merges, groups)
        return fn

    return deco


def get_strategy(name: str) -> Strategy:
    """The strategy registered as ``name``; ``ValueError`` listing the allowed names otherwise."""
    if name not in _STRATEGIES:
        raise ValueError(f"unknown reduction method {name!r}; allowed: {', '.join(available_methods())}")
    return _STRATEGIES[name]


def available_methods() -> list[str]:
    """Registered strategy names, sorted."""
    return sorted(_STRATEGIES)


def selection_methods() -> list[str]:
    """Registered strategies that keep (or merge into) a subset of tokens by a per-token score
    (``Strategy.score``) or by groups of their own (``Strategy.groups``), sorted: the ones a site that selects
    tokens itself (the ``vision`` site) can use."""
    return sorted(name for name, s in _STRATEGIES.items() if s.score is not None or s.groups is not None)

