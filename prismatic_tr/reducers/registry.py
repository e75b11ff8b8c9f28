"""Registry of reduction strategies, filled by decorators in the strategy modules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput


class ReduceFn(Protocol):
    def __call__(
        self, patches: torch.Tensor, cfg: ReducerConfig, generator: torch.Generator | None
    ) -> ReductionOutput: ...


@dataclass(frozen=True)
class Strategy:
    """A named strategy: ``reduce`` maps patches (B, N, D) to (B, K, D); ``count`` gives K from N."""

    name: str
    reduce: ReduceFn
    count: Callable[[int, ReducerConfig], int]
    uses_generator: bool = False


_STRATEGIES: dict[str, Strategy] = {}


def register_strategy(
    name: str, count: Callable[[int, ReducerConfig], int], uses_generator: bool = False
) -> Callable[[ReduceFn], ReduceFn]:
    """Decorator: register ``fn`` as the reduce function of strategy ``name``."""

    def deco(fn: ReduceFn) -> ReduceFn:
        if name in _STRATEGIES:
            raise ValueError(f"reduction strategy {name!r} is already registered")
        _STRATEGIES[name] = Strategy(name, fn, count, uses_generator)
        return fn

    return deco


def get_strategy(name: str) -> Strategy:
    """The strategy registered as ``name``; ``ValueError`` listing the allowed names otherwise."""
    _load_builtin()
    if name not in _STRATEGIES:
        raise ValueError(f"unknown reduction method {name!r}; allowed: {', '.join(available_methods())}")
    return _STRATEGIES[name]


def available_methods() -> list[str]:
    """Registered strategy names, sorted."""
    _load_builtin()
    return sorted(_STRATEGIES)


def _load_builtin() -> None:
    # Importing the package registers the built-in strategies; this keeps registry usable on its own.
    import prismatic_tr.reducers.strategies  # noqa: F401
