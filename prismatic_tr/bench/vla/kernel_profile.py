"""Where a step's GPU time goes: its kernels under ``torch.profiler``, by phase and by kind, for each setting.

    >>> rows = kernel_profile(vla, sample_inputs, ["vision:diverse:0.1@0.05"], steps=3)
    >>> rows[1]["kernel_ms"], rows[1]["by_kind_ms"]["gemm"], rows[1]["top"][0]

A captured step (:mod:`prismatic_tr.vla.cuda_graph`) launches the same kernels as the eager one with almost no gap
between them, so the sum of the kernels' device time of an eager step (``kernel_ms``) is what its replay can take at
best, and its split tells what a faster replay has to shrink. Each setting runs its step (the benchmark's phases,
:mod:`prismatic_tr.bench.vla.step` / ``oft_step``) once to warm up, then ``steps`` times under the profiler, each
phase inside a ``record_function`` range; every figure is per step (:func:`summarize_events`). Kinds (:func:`kernel_kind`, from the kernel's
name): ``gemm`` (matrix products), ``attention``, ``reduce`` (softmax, norms, argmax, sums), ``index`` (gather,
scatter, index, sort, top-k), ``elementwise`` (the rest of PyTorch's own kernels), ``other``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from prismatic_tr.bench.measure.timing import synchronize
from prismatic_tr.bench.vla.benchmark import STEPS
from prismatic_tr.bench.vla.measure import model_state, pick_unnorm_key, restore_model_state
from prismatic_tr.bench.vla.step import prepare_inputs
from prismatic_tr.models.family import family_of
from prismatic_tr.models.wrappers import unwrap_vla
from prismatic_tr.vla import reductions_attached
from prismatic_tr.vla.spec import Setting, parse_setting

T = TypeVar("T")
PHASE_PREFIX = "phase:"
# (kind, substrings of a kernel's lower-cased name), first match wins
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("flash", "fmha", "attention", "attn", "sdpa")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "matmul", "sm90_", "splitk")),
    ("index", ("index", "gather", "scatter", "sort", "topk", "radix", "select")),
    ("reduce", ("reduce", "softmax", "norm", "argmax", "max_", "sum", "mean")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "fill", "copy", "cat")),
)


def kernel_kind(name: str) -> str:
    """The kind of a kernel from its name (see :data:`KINDS`), "other" where none matches."""
    lower = name.lower()
    return next((kind for kind, keys in KINDS if any(k in lower for k in keys)), "other")


def _device_time(event: Any, own: bool) -> float:
    """Microseconds of device time of a profiler event (its own, or with its children's), across torch versions."""
    names = ("self_device_time_total", "self_cuda_time_total") if own else ("device_time_total", "cuda_time_total")
    return float(next((getattr(event, n) for n in names if hasattr(event, n)), 0.0))


def _is_kernel(event: Any) -> bool:
    return str(getattr(event, "device_type", "")).endswith("CUDA")


def labelled_call(name: str, fn: Callable[[], T]) -> T:
    """A phase ``call`` (:meth:`~prismatic_tr.bench.vla.step.PolicyStep.run`) inside a profiler range."""
    with torch.profiler.record_function(PHASE_PREFIX + name):
        return fn()


def summarize_events(events: Sequence[Any], steps: int, top: int) -> dict[str, Any]:
    """Per step, from ``torch.profiler``'s ``key_averages()`` of ``steps`` steps: ``kernel_ms`` (the kernels' device
    time summed), ``kernels`` (launches), ``by_kind_ms``, ``phase_span_ms`` (each ``phase:`` range's span on the GPU's
    timeline, gaps between kernels included: in an eager step mostly waiting for the host) and the ``top`` kernels
    by device time (name, kind, ms, launches). The phase ranges themselves are not kernels and are left out of the
    rest."""
    spans = {e.key[len(PHASE_PREFIX):]: _device_time(e, own=False) / 1e3 / steps
             for e in events if e.key.startswith(PHASE_PREFIX) and _is_kernel(e)}
    kernels = [e for e in events if _is_kernel(e) and not e.key.startswith(PHASE_PREFIX)]
    by_kind: dict[str, float] = defaultdict(float)
    for e in kernels:
        by_kind[kernel_kind(e.key)] += _device_time(e, own=True) / 1e3 / steps
    ranked = sorted(kernels, key=lambda e: _device_time(e, own=True), reverse=True)[:top]
    return {"kernel_ms": sum(by_kind.values()), "kernels": sum(e.count for e in kernels) / steps,
            "by_kind_ms": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])), "phase_span_ms": spans,
            "top": [{"name": e.key[:120], "kind": kernel_kind(e.key), "ms": _device_time(e, own=True) / 1e3 / steps,
                     "launches": e.count / steps} for e in ranked]}


def profile_step(run: Callable[[], Any], device: torch.device, steps: int, top: int) -> dict[str, Any]:
    """``run()`` once, then ``steps`` times under ``torch.profiler``: :func:`summarize_events` of them."""
    from torch.profiler import ProfilerActivity, profile

    run()
    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run()
        synchronize(device)
    return summarize_events(prof.key_averages(), steps, top)


def kernel_profile(vla: nn.Module, sample_inputs: dict[str, torch.Tensor], settings: Sequence[str | Setting],
                   steps: int = 3, top: int = 15, seed: int = 0) -> list[dict[str, Any]]:
    """:func:`profile_step` of ``vla``'s step unreduced and under each of ``settings``; one dict per setting
    (``setting`` and the profile). The model is left as it was found."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} is not allowed; use an integer >= 1")
    device = next(unwrap_vla(vla).parameters()).device
    tokens = unwrap_vla(vla).get_action_dim(pick_unnorm_key(vla, None))
    step = STEPS[family_of(vla).name](vla, prepare_inputs(vla, sample_inputs, device), tokens)
    parsed = list(dict.fromkeys([parse_setting("none"), *(s if isinstance(s, Setting) else parse_setting(s)
                                                          for s in settings)]))
    saved, rows = model_state(vla), []
    try:
        with torch.no_grad():
            for s in parsed:
                with reductions_attached(vla, s.reductions(seed)):
                    rows.append({"setting": s.label,
                                 **profile_step(lambda: step.run(labelled_call), device, steps, top)})
    finally:
        restore_model_state(vla, saved)
    return rows


def recount(row: dict[str, Any]) -> dict[str, Any]:
    """A row written before the phase ranges were left out of the kernels (``by_phase_ms``: each range's span,
    counted among the kernels, once a step) in :func:`summarize_events`' form: the spans taken out of
    ``kernel_ms``, ``kernels``, ``by_kind_ms`` (under the kind :func:`kernel_kind` gave their names) and ``top``."""
    if "by_phase_ms" not in row:
        raise ValueError(f"row {row.get('setting')!r} has no by_phase_ms: it is already in the current form")
    spans = row["by_phase_ms"]
    by_kind = dict(row["by_kind_ms"])
    for phase, ms in spans.items():
        by_kind[kernel_kind(PHASE_PREFIX + phase)] -= ms
    by_kind = {k: max(v, 0.0) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])}
    rest = {k: v for k, v in row.items() if k not in ("by_phase_ms", "by_kind_ms", "top", "kernel_ms", "kernels")}
    return {**rest, "kernel_ms": row["kernel_ms"] - sum(spans.values()), "kernels": row["kernels"] - len(spans),
            "by_kind_ms": by_kind, "phase_span_ms": spans,
            "top": [t for t in row["top"] if not t["name"].startswith(PHASE_PREFIX)]}
