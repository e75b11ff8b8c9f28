"""Reach the VLA inside the wrappers training and compiling put around it: PEFT, DDP and ``torch.compile``.

Below :mod:`prismatic_tr.vla` (which re-exports :func:`unwrap_vla`) so that :mod:`prismatic_tr.models.family` can
tell a wrapped model's family.
"""

from __future__ import annotations

from typing import Any

from torch import nn

# (attribute path from the object handed in, what it is) in search order; listed in the error message.
WRAPPER_PATHS: tuple[tuple[str, str], ...] = (
    ("", "the model itself (HF OpenVLA remote code or native prismatic)"),
    ("module", "DistributedDataParallel / DataParallel"),
    ("_orig_mod", "torch.compile"),
    ("base_model.model", "peft.PeftModel"),
)
MAX_DEPTH = 6


def get_path(obj: Any, path: str) -> Any:
    """``obj.<path>`` (dotted; "" is ``obj``), or None where an attribute is missing."""
    for name in path.split(".") if path else []:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _inner(obj: Any) -> Any:
    return next((get_path(obj, p) for p, _ in WRAPPER_PATHS[1:] if get_path(obj, p) is not None), None)


def unwrap_vla(vla: nn.Module) -> nn.Module:
    """The innermost object that owns ``vision_backbone``; ``ValueError`` if there is none."""
    obj: Any = vla
    for _ in range(MAX_DEPTH):
        if isinstance(getattr(obj, "vision_backbone", None), nn.Module):
            return obj
        inner = _inner(obj)
        if inner is None or inner is obj:
            break
        obj = inner
    looked = "; ".join(f"{(p + '.') if p else ''}vision_backbone ({what})" for p, what in WRAPPER_PATHS)
    raise ValueError(
        f"Unable to locate vision_backbone in {type(vla).__name__}: looked for {looked}, "
        f"nested up to {MAX_DEPTH} wrappers deep"
    )


def innermost_vla(vla: nn.Module) -> nn.Module:
    """The innermost model that owns ``vision_backbone``, through every wrapper (PEFT forwards attribute access to
    its base, so :func:`unwrap_vla` stops at the PEFT model): the object whose own ``forward``, ``generate`` and
    ``predict_action`` run whichever wrapper is called. ``ValueError`` if there is none."""
    obj = unwrap_vla(vla)
    for _ in range(MAX_DEPTH):
        inner = _inner(obj)
        if inner is None or inner is obj or not isinstance(getattr(inner, "vision_backbone", None), nn.Module):
            return obj
        obj = inner
    return obj
