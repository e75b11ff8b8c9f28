"""Multiply-accumulate counts (MACs) of a forward pass, via ``torch.utils.flop_counter.FlopCounterMode``.

Convention (the one of the earlier DeiT study, fvcore-style): count only matmul-like operators - linear
(``addmm``/``mm``), batched matmuls (``bmm``, including the two matmuls inside fused
``scaled_dot_product_attention``) and convolutions - with one MAC per multiply-add. Norms, softmax,
activations and element-wise ops are not counted. This gives DeiT-B/16 17.564 GMACs at 224 px and 78.495 at
448 px, and TopK keep 0.1 at blocks 3/6/9 5.552 and 24.727 (``tests/bench/test_bench_core.py::
test_reference_gmacs_within_half_percent`` checks them against the earlier DeiT study's 17.57 / 78.52 / 5.55 /
24.73, someone else's figures, not in this repository).

Counting runs the function once; it works on the CPU and on ``meta`` tensors (no real compute):

>>> macs = count_macs(model, torch.randn(1, 3, 224, 224))          # per forward of the given batch
>>> gmacs_per_image = macs / 1e9 / 1
>>> by_module = count_macs_by_module(model, x, depth=2)           # {"Global": n, "blocks": n, ...}
>>> with empty_weights():                                         # parameters on "meta": no memory
...     big = timm.create_model("deit_base_patch16_224", img_size=448)
>>> count_macs(big.eval(), torch.empty(1, 3, 448, 448, device="meta"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

try:  # the registry maps aten overload packets to flop formulas
    from torch.utils.flop_counter import flop_registry as _FLOP_REGISTRY
except ImportError:  # pragma: no cover - very old torch
    _FLOP_REGISTRY = {}

_NEEDS_MODS = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 3)

# follows fvcore's MAC convention (facebookresearch/fvcore, Apache-2.0; no code taken, see NOTICE): only
# matmul-like ops, one MAC per multiply-add, as the DeiT study counted.
_SDPA_OP_NAMES = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
)


def _sdpa_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, **kwargs: Any) -> int:
    """FLOPs of attention with q (B, H, Lq, E), k (B, H, Lk, E), v (B, H, Lk, Ev): QK^T plus AV, 2 per MAC."""
    b, h, lq, e = query_shape
    lk = key_shape[-2]
    ev = value_shape[-1]
    return 2 * b * h * lq * lk * (e + ev)


def _missing_sdpa_mapping() -> dict[Any, Callable[..., int]]:
    """Flop formulas for fused-attention operators this torch has but its flop registry lacks."""
    mapping: dict[Any, Callable[..., int]] = {}
    for name in _SDPA_OP_NAMES:
        packet = getattr(torch.ops.aten, name) if hasattr(torch.ops.aten, name) else None
        if packet is not None and packet not in _FLOP_REGISTRY:
            mapping[packet] = _sdpa_flops
    return mapping


def _run_counted(model_or_fn: torch.nn.Module | Callable[..., Any], inputs: tuple, depth: int) -> FlopCounterMode:
    """Run ``model_or_fn(*inputs)`` under ``no_grad`` inside a FlopCounterMode and return the mode."""
    if not callable(model_or_fn):
        raise ValueError(f"model_or_fn must be an nn.Module or a callable, got {type(model_or_fn).__name__}")
    kwargs: dict[str, Any] = {}
    if isinstance(model_or_fn, torch.nn.Module) and _NEEDS_MODS:
        kwargs["mods"] = model_or_fn  # torch < 2.3 tracks modules only when given them
    mode = FlopCounterMode(display=False, depth=depth, custom_mapping=_missing_sdpa_mapping(), **kwargs)
    with torch.no_grad(), mode:
        model_or_fn(*inputs)
    return mode


def count_macs(model_or_fn: torch.nn.Module | Callable[..., Any], *inputs: Any) -> int:
    """MACs of one call ``model_or_fn(*inputs)`` (all images of the batch together); FLOPs / 2."""
    mode = _run_counted(model_or_fn, inputs, depth=2)
    return int(mode.get_total_flops()) // 2


def count_macs_by_module(
    model_or_fn: torch.nn.Module | Callable[..., Any], *inputs: Any, depth: int = 2
) -> dict[str, int]:
    """MACs per module name down to ``depth`` levels (``"Global"`` is the total), for one call."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth={depth!r} must be an int >= 1")
    mode = _run_counted(model_or_fn, inputs, depth=depth)
    return {name: int(sum(ops.values())) // 2 for name, ops in mode.get_flop_counts().items()}


def count_macs_by_op(model_or_fn: torch.nn.Module | Callable[..., Any], *inputs: Any) -> dict[str, int]:
    """MACs per counted aten operator (e.g. ``{"aten.addmm": ..., "aten.bmm": ...}``) for one call."""
    mode = _run_counted(model_or_fn, inputs, depth=1)
    return {str(op): int(v) // 2 for op, v in mode.get_flop_counts().get("Global", {}).items()}


def gmacs_per_sample(model_or_fn: torch.nn.Module | Callable[..., Any], x: torch.Tensor) -> float:
    """GMACs per sample of ``model_or_fn(x)`` for a batched input ``x`` of shape (B, ...)."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[0] < 1:
        raise ValueError(f"x must be a batched tensor (B >= 1, ...), got {type(x).__name__}")
    return count_macs(model_or_fn, x) / 1e9 / x.shape[0]


@contextmanager
def empty_weights() -> Iterator[None]:
    """Modules built inside get their parameters and buffers on the ``meta`` device (no memory, no init).

    Works on torch 2.2, where building a timm model under ``torch.device("meta")`` fails (timm calls
    ``.item()`` on a linspace). Use the model only for shape-level work such as ``count_macs`` with meta inputs.
    """
    register_parameter = torch.nn.Module.register_parameter
    register_buffer = torch.nn.Module.register_buffer

    def _param(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        register_parameter(module, name, param)
        if param is not None:
            moved = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
            module._parameters[name] = moved

    def _buffer(module: torch.nn.Module, name: str, tensor: torch.Tensor | None, persistent: bool = True) -> None:
        moved = tensor.to("meta") if isinstance(tensor, torch.Tensor) else tensor
        register_buffer(module, name, moved, persistent=persistent)

    torch.nn.Module.register_parameter = _param  # type: ignore[method-assign]
    torch.nn.Module.register_buffer = _buffer  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        torch.nn.Module.register_buffer = register_buffer  # type: ignore[method-assign]
