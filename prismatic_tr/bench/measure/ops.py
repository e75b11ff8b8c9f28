"""Counting the aten operators a forward dispatches, and finding host synchronisations among them.

Everything here runs the function once under a ``TorchDispatchMode`` (works on CPU, CUDA and ``meta``).
"Kernel-launching" operators are dispatched operators minus views and pure metadata/allocation operators,
which on a GPU launch no kernel.

>>> ops = count_dispatched_ops(model, x)             # Counter({"aten.addmm": 48, "aten.view": 96, ...})
>>> launching = kernel_ops(ops)                      # views / metadata removed
>>> find_host_syncs(model, x)                        # Counter() when the forward never waits for the device
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that make the host wait for the device (their result is read on the host, or an output size
# depends on tensor values). Matched on the overload-packet name, e.g. "aten.nonzero".
HOST_SYNC_OPS: frozenset[str] = frozenset(
    {
        "aten._local_scalar_dense",  # tensor.item(), int(t), float(t), bool(t), t.tolist()
        "aten.item",
        "aten.is_nonzero",  # `if tensor:`
        "aten.equal",  # torch.equal returns a Python bool
        "aten.allclose",
        "aten.nonzero",  # output size depends on values (also behind boolean-mask indexing, torch.where(c))
        "aten.masked_select",
        "aten.unique",
        "aten._unique",
        "aten._unique2",
        "aten.unique_dim",
        "aten.unique_consecutive",
        "aten.bincount",
        "aten.histogram",
        "aten.repeat_interleave",  # the Tensor-repeats overload without output_size
        "aten.count_nonzero",
        "aten._assert_async",  # may sync depending on backend
    }
)

# Operators that launch no device kernel: metadata changes, aliases and bare allocations.
NON_LAUNCHING_OPS: frozenset[str] = frozenset(
    {
        "aten._unsafe_view",
        "aten._reshape_alias",
        "aten.detach",
        "aten.alias",
        "aten.lift_fresh",
        "aten.empty",
        "aten.empty_strided",
        "aten.empty_like",
        "aten.new_empty",
        "aten.new_empty_strided",
        "aten.sym_size",
        "aten.sym_stride",
        "aten.sym_numel",
        "aten.sym_storage_offset",
        "aten.is_same_size",
        "aten.resolve_conj",
        "aten.resolve_neg",
        "prim.device",
        "prim.layout",
    }
)


def _is_view(func: Any) -> bool:
    """True when ``func`` returns an alias of an input (a view) according to its schema."""
    is_view = getattr(func, "is_view", None)
    if isinstance(is_view, bool):
        return is_view
    returns = func._schema.returns
    return len(returns) > 0 and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


class _OpRecorder(TorchDispatchMode):
    """Records (name, is_view, is_cross_device_copy, has_bool_index) for every dispatched aten operator."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, bool]] = []
        self.syncs: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        self.records.append((name, _is_view(func)))
        out = func(*args, **kwargs)
        self._check_sync(func, name, args, kwargs, out)
        return out

    def _check_sync(self, func: Any, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        if name in HOST_SYNC_OPS:
            if name == "aten.repeat_interleave" and kwargs.get("output_size") is not None:
                return
            if name == "aten.repeat_interleave" and not isinstance(args[0] if args else None, torch.Tensor):
                return
            self.syncs[name] += 1
        elif name == "aten.index" and _has_bool_index(args):
            self.syncs["aten.index(bool mask)"] += 1
        elif name in ("aten._to_copy", "aten.copy_") and _crosses_to_host(name, args, out):
            self.syncs[f"{name}(device->cpu)"] += 1


def _has_bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _crosses_to_host(name: str, args: tuple, out: Any) -> bool:
    """A copy from an accelerator into CPU memory (the host must wait for it)."""
    if name == "aten._to_copy":
        src, dst = (args[0] if args else None), out
    else:
        dst, src = (args[0] if args else None), (args[1] if len(args) > 1 else None)
    if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
        return False
    return src.device.type not in ("cpu", "meta") and dst.device.type == "cpu"


def _record(fn: Callable[..., Any], args: tuple, kwargs: dict) -> _OpRecorder:
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    recorder = _OpRecorder()
    with torch.no_grad(), recorder:
        fn(*args, **kwargs)
    return recorder


def count_dispatched_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Counter[str]:
    """Counter of aten operator names (overload packets, e.g. ``"aten.addmm"``) dispatched by one call."""
    return Counter(name for name, _ in _record(fn, args, kwargs).records)


def count_kernel_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Counter[str]:
    """Like ``count_dispatched_ops`` but only operators that launch work (views/metadata excluded)."""
    records = _record(fn, args, kwargs).records
    return Counter(name for name, view in records if not view and name not in NON_LAUNCHING_OPS)


def kernel_ops(ops: Counter[str]) -> Counter[str]:
    """Drop views and non-launching operators from a ``count_dispatched_ops`` result (views by name)."""
    return Counter({name: n for name, n in ops.items() if not is_view_name(name) and name not in NON_LAUNCHING_OPS})


def is_view_name(name: str) -> bool:
    """True when the aten operator called ``name`` (``"aten.view"``) has a view overload in this torch.

    Approximate (an operator with both view and non-view overloads counts as a view); ``count_kernel_ops``
    decides per dispatched overload and is exact.
    """
    ns, _, op = name.partition(".")
    if ns != "aten" or not op or not hasattr(torch.ops.aten, op):
        return False
    packet = getattr(torch.ops.aten, op)
    overloads = [getattr(packet, o) for o in packet.overloads()]
    return any(_is_view(o) for o in overloads)


def find_host_syncs(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Counter[str]:
    """Operators in one call of ``fn`` that force a host-device synchronisation (empty Counter: none).

    Detected: see ``HOST_SYNC_OPS``, boolean-mask indexing (``aten.index`` with a bool index) and copies from
    an accelerator to the CPU. Works on CPU tensors too (what *would* sync on a GPU).
    """
    return Counter(_record(fn, args, kwargs).syncs)


def find_capture_hazards(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Counter[str]:
    """What in one call of ``fn`` a CUDA-graph capture would refuse (empty Counter: nothing): the host syncs of
    :func:`find_host_syncs`, and tensors made from host data (``aten.lift_fresh``: ``torch.tensor(...)``, a Python
    number assigned through an index), which on a GPU are copies from host memory. Works on CPU tensors."""
    recorder = _record(fn, args, kwargs)
    hazards = Counter(recorder.syncs)
    made = sum(1 for name, _ in recorder.records if name in ("aten.lift_fresh", "aten.lift_fresh_copy"))
    if made:
        hazards["aten.lift_fresh(host data)"] = made
    return hazards


def ops_added(baseline: Counter[str], reduced: Counter[str]) -> Counter[str]:
    """Operators the reduced run dispatches more often than the baseline (positive differences only)."""
    return Counter({name: n - baseline.get(name, 0) for name, n in reduced.items() if n > baseline.get(name, 0)})
