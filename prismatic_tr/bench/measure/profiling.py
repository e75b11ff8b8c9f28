"""Profiling one forward: operator and kernel counts, device time against wall time, what reduction adds.

>>> prof = profile_forward(lambda: model(x), device="cpu")
>>> prof.dispatched_ops, prof.kernel_launches, prof.device_time_ms, prof.wall_time_ms
>>> delta = reduction_op_delta(base_model, reduced_model, x, num_locations=3)
>>> delta.per_location, delta.summary()          # 8.0, "+8/loc: bmm,cat,gather,mean,mul,_softmax,sort,topk"
>>> graph_breaks(reduced_model, x)               # (0, []) after torch.compile(fullgraph=True) compiled and ran it
>>> compile_fullgraph(reduced_model, x)          # the compiled output, or FullGraphError naming the failure

``device_time_ms``: on CUDA the summed duration of the device activities (kernels, memcpy, memset), each
counted once (:func:`device_time_us`); on a CPU the summed self time of the aten operators (the time the
device - the CPU - spends inside operators), so wall minus device time is framework/Python overhead in
both cases.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from prismatic_tr.bench.measure.devices import as_device
from prismatic_tr.bench.measure.ops import count_dispatched_ops, count_kernel_ops, find_host_syncs, ops_added
from prismatic_tr.bench.measure.timing import synchronize

_LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch")


@dataclass
class ProfileSummary:
    """Per-forward averages over the profiled calls."""

    dispatched_ops: float  # aten operators per forward (profiler view, nested calls included)
    kernel_launches: float | None  # CUDA launch API calls per forward; None on a CPU
    device_time_ms: float  # see module doc
    wall_time_ms: float

    @property
    def device_fraction(self) -> float:
        """device time / wall time (near 1: compute-bound; small: launch/overhead-bound)."""
        return self.device_time_ms / self.wall_time_ms if self.wall_time_ms > 0 else 0.0


def _self_device_us(event: Any) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total"):  # torch >= 2.4 / torch 2.2
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def device_time_us(events: Iterable[Any]) -> float:
    """Total device time (us) of profiler events: the device-side events (kernels, memcpy, memset) only.

    ``torch.profiler`` lists each kernel twice: as a device event (its own duration) and inside the
    ``self_device_time_total`` of the CPU operator that launched it. Summing every row of ``key_averages()``
    therefore counts kernel time twice; summing the device events counts it once (and also keeps kernels
    launched outside any operator).
    """
    from torch.autograd import DeviceType

    return sum(_self_device_us(e) for e in events if getattr(e, "device_type", DeviceType.CPU) != DeviceType.CPU)


def profile_forward(fn: Callable[[], Any], device: torch.device | str | None = None, repeats: int = 3,
                    warmup: int = 1) -> ProfileSummary:
    """Profile ``repeats`` calls of ``fn`` with ``torch.profiler`` after ``warmup`` untimed ones."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats={repeats!r} must be >= 1 and warmup={warmup!r} >= 0")
    dev = as_device(device)
    cuda = dev.type == "cuda" and torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad():
        for _ in range(warmup):
            fn()
        synchronize(dev)
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for _ in range(repeats):
                fn()
            synchronize(dev)
            wall = (time.perf_counter() - t0) * 1e3
    events = prof.events()
    n_ops = sum(1 for e in events if e.name.startswith("aten::"))
    if cuda:
        launches: float | None = sum(1 for e in events if e.name in _LAUNCH_NAMES) / repeats
        dev_us = device_time_us(events)
    else:
        launches = None
        dev_us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key.startswith("aten::"))
    return ProfileSummary(n_ops / repeats, launches, dev_us / 1e3 / repeats, wall / repeats)


@dataclass
class OpDelta:
    """Operators a reduced forward dispatches beyond the baseline forward."""

    added: Counter[str]  # kernel-launching operators added (views excluded), whole forward
    num_locations: int
    baseline_ops: int  # kernel-launching operators of the baseline forward
    reduced_ops: int
    host_syncs: Counter[str]  # host synchronisations in the reduced forward

    @property
    def per_location(self) -> float:
        return (self.reduced_ops - self.baseline_ops) / max(1, self.num_locations)

    def summary(self) -> str:
        """One table cell, e.g. ``+8/loc: bmm,cat,gather,...; syncs 0``."""
        names = ",".join(sorted(name.removeprefix("aten.") for name in self.added))
        syncs = sum(self.host_syncs.values())
        return f"+{self.per_location:.3g}/loc: {names or '-'}; syncs {syncs}"


def reduction_op_delta(baseline: Callable[..., Any], reduced: Callable[..., Any], *args: Any,
                       num_locations: int = 1) -> OpDelta:
    """Compare the kernel-launching operators of ``reduced(*args)`` with ``baseline(*args)``.

    Run it on small inputs (or ``meta`` tensors): the counts depend on shapes only through the code path.
    """
    if num_locations < 1:
        raise ValueError(f"num_locations={num_locations!r} must be >= 1")
    base = count_kernel_ops(baseline, *args)
    red = count_kernel_ops(reduced, *args)
    return OpDelta(ops_added(base, red), num_locations, sum(base.values()), sum(red.values()),
                   find_host_syncs(reduced, *args))


def dispatched_per_forward(fn: Callable[..., Any], *args: Any) -> tuple[int, int]:
    """(all dispatched aten operators, kernel-launching ones) of one call."""
    return sum(count_dispatched_ops(fn, *args).values()), sum(count_kernel_ops(fn, *args).values())


class FullGraphError(RuntimeError):
    """``torch.compile(fullgraph=True)`` failed: a graph break, an object dynamo cannot trace, or the backend."""


def compile_fullgraph(model: Callable[..., Any], *args: Any, backend: str = "inductor") -> Any:
    """Compile ``model`` with ``fullgraph=True``, run it once on ``args`` (no grad) and return the output.

    Raises :class:`FullGraphError` (with the original error chained) when compilation or the compiled run
    fails. ``torch._dynamo.explain`` alone is not enough: it reports 0 graph breaks for a module that takes
    a ``torch.Generator``, which ``fullgraph=True`` rejects ("an opaque object was created in the middle
    of the program").
    """
    import torch._dynamo as dynamo

    dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    try:
        with torch.no_grad():
            return compiled(*args)
    except Exception as err:  # noqa: BLE001 - dynamo / backend errors have many types; name and chain them
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise FullGraphError(f"torch.compile(fullgraph=True, backend={backend!r}) failed on "
                             f"{type(model).__name__}: {type(err).__name__}: {first}") from err


def graph_breaks(model: Callable[..., Any], *args: Any, backend: str = "inductor") -> tuple[int, list[str]]:
    """(number of graph breaks, their reasons) that ``torch.compile`` meets tracing ``model(*args)``.

    When ``torch._dynamo.explain`` finds no break, the model is also compiled with ``fullgraph=True`` and
    run (:func:`compile_fullgraph`), so ``(0, [])`` means it really compiled; a failure raises
    :class:`FullGraphError`.
    """
    import torch._dynamo as dynamo

    dynamo.reset()
    with torch.no_grad():
        explanation = dynamo.explain(model)(*args)
    reasons = [str(getattr(b, "reason", b)) for b in getattr(explanation, "break_reasons", [])]
    count = int(explanation.graph_break_count)
    if count == 0:
        compile_fullgraph(model, *args, backend=backend)
    return count, reasons
