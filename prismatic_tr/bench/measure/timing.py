"""Timing primitives: device synchronisation, repeated timing, phase timing, interleaving, summaries.

On a CUDA device every timed call is bracketed by CUDA events, recorded on the current stream of the device
being measured (not of whatever device is current), and the host synchronises exactly once, after the last
call, so nothing inside the timed region waits for the GPU. On a CPU (or any device without events)
calls are timed with ``time.perf_counter`` around a synchronised call.

    >>> stats = time_fn(lambda: model(x), warmup=5, repeats=20, device="cuda")
    >>> stats.median_ms, stats.p10_ms, stats.p90_ms
    >>> timer = Timer("cuda")
    >>> for _ in range(10):
    ...     timer.start(); v = vision(px); timer.mark("vision"); y = llm(v); timer.mark("llm"); timer.stop()
    >>> timer.summary()["vision"]["median"]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from prismatic_tr.bench.measure.devices import DeviceLike, as_device


def _uses_events(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available()


def synchronize(device: DeviceLike = None) -> None:
    """Wait until all queued work on ``device`` has finished (no-op on the CPU)."""
    dev = as_device(device)
    if dev.type == "cuda":
        if torch.cuda.is_available():
            torch.cuda.synchronize(dev)
        return
    backend = getattr(torch, dev.type, None)
    sync = getattr(backend, "synchronize", None) if dev.type != "cpu" else None
    if callable(sync):
        sync()


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` in [0, 100] of already sorted values."""
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    frac = pos - lo
    return float(sorted_values[lo] * (1.0 - frac) + sorted_values[hi] * frac)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Summary of timing samples: ``{"median", "p10", "p90", "mean", "n"}`` (same unit as the samples)."""
    values = sorted(float(s) for s in samples)
    if not values:
        raise ValueError("summarize() needs at least one sample, got an empty sequence")
    return {
        "median": _percentile(values, 50.0),
        "p10": _percentile(values, 10.0),
        "p90": _percentile(values, 90.0),
        "mean": sum(values) / len(values),
        "n": float(len(values)),
    }


@dataclass
class TimingStats:
    """Per-call times in milliseconds of ``repeats`` calls, plus the wall time of the whole timed loop."""

    samples_ms: list[float]
    total_s: float

    @property
    def median_ms(self) -> float:
        return summarize(self.samples_ms)["median"]

    @property
    def p10_ms(self) -> float:
        return summarize(self.samples_ms)["p10"]

    @property
    def p90_ms(self) -> float:
        return summarize(self.samples_ms)["p90"]

    @property
    def mean_ms(self) -> float:
        return summarize(self.samples_ms)["mean"]

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def as_dict(self) -> dict[str, float]:
        """``summarize`` of the samples (ms) plus ``total_s``."""
        return {**summarize(self.samples_ms), "total_s": self.total_s}


def _check_counts(warmup: int, repeats: int) -> None:
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} must be an int >= 0")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an int >= 1")


def event_device(device: torch.device, current_index: int) -> torch.device:
    """The CUDA device whose current stream the events of a measurement on ``device`` go to: ``device``
    itself, with a bare ``cuda`` meaning the current device (``current_index``)."""
    if device.type != "cuda":
        raise ValueError(f"CUDA events need a CUDA device, got {device}")
    return torch.device("cuda", current_index if device.index is None else device.index)


class _Stopwatch:
    """Records time points: CUDA events on a GPU (read after one sync), perf_counter after a sync elsewhere."""

    def __init__(self, device: DeviceLike) -> None:
        self.device = as_device(device)
        self.events = _uses_events(self.device)

    def point(self) -> Any:
        if self.events:
            dev = event_device(self.device, torch.cuda.current_device())
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(dev))  # not ev.record(): that uses the *current* device
            return ev
        synchronize(self.device)
        return time.perf_counter()

    def elapsed_ms(self, a: Any, b: Any) -> float:
        """Milliseconds between two points; for events call only after ``finish()``."""
        return float(a.elapsed_time(b)) if self.events else (b - a) * 1e3

    def finish(self) -> None:
        synchronize(self.device)


def time_fn(
    fn: Callable[[], Any], warmup: int = 5, repeats: int = 20, device: DeviceLike = None
) -> TimingStats:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed calls.

    On CUDA each call sits between two events and the host synchronises once at the end; ``total_s`` is the
    wall time from before the first timed call to that final synchronisation.
    """
    _check_counts(warmup, repeats)
    watch = _Stopwatch(device)
    for _ in range(warmup):
        fn()
    watch.finish()
    t0 = time.perf_counter()
    points = [watch.point()]
    for _ in range(repeats):
        fn()
        points.append(watch.point())
    watch.finish()
    total = time.perf_counter() - t0
    samples = [watch.elapsed_ms(points[i], points[i + 1]) for i in range(repeats)]
    return TimingStats(samples_ms=samples, total_s=total)


def interleaved(
    fns: Mapping[str, Callable[[], Any]], warmup: int = 3, repeats: int = 10, device: DeviceLike = None,
    contexts: Mapping[str, Callable[[], AbstractContextManager[Any]]] | None = None,
) -> dict[str, TimingStats]:
    """Time several functions round-robin (A B A B ...) so slow drift of the machine affects all alike.

    ``warmup`` untimed rounds come first. ``contexts`` (optional) maps a name to a factory of a context
    manager entered around every call of that function and left outside its timed region (e.g. attaching
    one setting's token reduction), so setting up a variant is never timed.

    Returns ``{name: TimingStats}``; ``total_s`` of each entry is the sum of its own call times.
    """
    if not fns:
        raise ValueError("interleaved() needs at least one function, got an empty mapping")
    _check_counts(warmup, repeats)
    unknown = sorted(set(contexts or {}) - set(fns))
    if unknown:
        raise ValueError(f"contexts for {unknown} name no function; functions: {sorted(fns)}")
    watch = _Stopwatch(device)

    def around(name: str) -> AbstractContextManager[Any]:
        factory = (contexts or {}).get(name)
        return factory() if factory is not None else nullcontext()

    for _ in range(warmup):
        for name, fn in fns.items():
            with around(name):
                fn()
    watch.finish()
    marks: dict[str, list[tuple[Any, Any]]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            with around(name):
                start = watch.point()
                fn()
                marks[name].append((start, watch.point()))
    watch.finish()
    out = {}
    for name, pairs in marks.items():
        samples = [watch.elapsed_ms(a, b) for a, b in pairs]
        out[name] = TimingStats(samples_ms=samples, total_s=sum(samples) / 1e3)
    return out


@dataclass
class Timer:
    """Times consecutive phases of repeated runs (e.g. vision, reducer, projector, prefill, decode).

    Usage per run: ``start()``, then ``mark(name)`` at the end of each phase (or ``with timer.phase(name)``),
    then ``stop()``. On CUDA only events are recorded; the single host synchronisation happens in
    ``results()``/``summary()``. ``"total"`` is reported as the time from ``start()`` to the last mark.
    """

    device: DeviceLike = None
    _watch: _Stopwatch = field(init=False, repr=False)
    _runs: list[list[tuple[str, Any]]] = field(init=False, default_factory=list, repr=False)
    _current: list[tuple[str, Any]] | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self._watch = _Stopwatch(self.device)

    def start(self) -> None:
        """Begin a run (records the start point)."""
        if self._current is not None:
            raise ValueError("Timer.start() called twice without stop()")
        self._current = [("__start__", self._watch.point())]

    def mark(self, name: str) -> None:
        """End phase ``name`` of the current run (the phase began at the previous mark or at ``start()``)."""
        if self._current is None:
            raise ValueError(f"Timer.mark({name!r}) called before start()")
        if name in ("__start__", "total") or any(n == name for n, _ in self._current):
            raise ValueError(f"phase name {name!r} is reserved or already used in this run")
        self._current.append((name, self._watch.point()))

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Context manager form: the phase ends (``mark(name)``) when the block exits."""
        yield
        self.mark(name)

    def stop(self) -> None:
        """End the current run; no synchronisation happens here."""
        if self._current is None:
            raise ValueError("Timer.stop() called before start()")
        self._runs.append(self._current)
        self._current = None

    def results(self) -> dict[str, list[float]]:
        """``{phase: [ms per run]}`` plus ``"total"``; synchronises the device once."""
        self._watch.finish()
        out: dict[str, list[float]] = {}
        for run in self._runs:
            for (_, prev), (name, point) in zip(run[:-1], run[1:], strict=True):
                out.setdefault(name, []).append(self._watch.elapsed_ms(prev, point))
            if len(run) > 1:
                out.setdefault("total", []).append(self._watch.elapsed_ms(run[0][1], run[-1][1]))
        return out

    def summary(self) -> dict[str, dict[str, float]]:
        """``{phase: summarize(ms samples)}`` for every phase seen, plus ``"total"``."""
        return {name: summarize(samples) for name, samples in self.results().items()}

    def reset(self) -> None:
        """Forget all recorded runs."""
        self._runs.clear()
        self._current = None
