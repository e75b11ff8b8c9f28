"""Find the vision backbone of an OpenVLA model, through PEFT, DDP and ``torch.compile`` wrappers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

# (attribute path from the object handed in, what it is) in search order; listed in the error message.
_WRAPPER_PATHS: tuple[tuple[str, str], ...] = (
    ("", "the model itself (HF OpenVLA remote code or native prismatic)"),
    ("module", "DistributedDataParallel / DataParallel"),
    ("_orig_mod", "torch.compile"),
    ("base_model.model", "peft.PeftModel"),
)
_MAX_DEPTH = 6
# While a reduction is attached the backbone's class is a subclass made by ``attach``; this holds the original.
ORIGINAL_CLASS_ATTR = "_prismatic_tr_original_class"


@dataclass(frozen=True)
class BackboneInfo:
    """Where the reduction goes.

    model: the innermost VLA (the object that owns ``vision_backbone``), unwrapped.
    backbone: ``model.vision_backbone``; its output (B, N, D) feeds ``model.projector``.
    style: ``"hf"`` (OpenVLA remote code / reference model: ``featurizer`` and ``get_num_patches()``) or
        ``"prismatic"`` (native prismatic: a ``num_patches`` property).
    """

    model: nn.Module
    backbone: nn.Module
    style: str


def _get_path(obj: Any, path: str) -> Any:
    for name in path.split(".") if path else []:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def unwrap_vla(vla: nn.Module) -> nn.Module:
    """The innermost object that owns ``vision_backbone``; ``ValueError`` if there is none."""
    obj: Any = vla
    for _ in range(_MAX_DEPTH):
        if isinstance(getattr(obj, "vision_backbone", None), nn.Module):
            return obj
        inner = next((_get_path(obj, p) for p, _ in _WRAPPER_PATHS[1:] if _get_path(obj, p) is not None), None)
        if inner is None or inner is obj:
            break
        obj = inner
    looked = "; ".join(f"{(p + '.') if p else ''}vision_backbone ({what})" for p, what in _WRAPPER_PATHS)
    raise ValueError(
        f"Unable to locate vision_backbone in {type(vla).__name__}: looked for {looked}, "
        f"nested up to {_MAX_DEPTH} wrappers deep"
    )


def innermost_vla(vla: nn.Module) -> nn.Module:
    """The innermost model that owns ``vision_backbone``, through every wrapper (PEFT forwards attribute access to
    its base, so :func:`unwrap_vla` stops at the PEFT model): the object whose own ``forward``, ``generate`` and
    ``predict_action`` run whichever wrapper is called. ``ValueError`` if there is none."""
    obj = unwrap_vla(vla)
    for _ in range(_MAX_DEPTH):
        inner = next((_get_path(obj, p) for p, _ in _WRAPPER_PATHS[1:] if _get_path(obj, p) is not None), None)
        if inner is None or inner is obj or not isinstance(getattr(inner, "vision_backbone", None), nn.Module):
            return obj
        obj = inner
    return obj


def find_vision_backbone(vla: nn.Module) -> BackboneInfo:
    """Locate the backbone and tell which flavour of OpenVLA model holds it."""
    model = unwrap_vla(vla)
    backbone = model.vision_backbone
    cls = own_class(backbone)
    style = "prismatic" if hasattr(cls, "num_patches") and not hasattr(cls, "get_num_patches") else "hf"
    return BackboneInfo(model=model, backbone=backbone, style=style)


def own_class(backbone: nn.Module) -> type:
    """The backbone's class as its model built it (not the counting subclass swapped in while attached)."""
    return vars(backbone).get(ORIGINAL_CLASS_ATTR, type(backbone))


def original_num_patches(backbone: nn.Module) -> int | None:
    """Patch tokens per image the backbone emits without reduction, from its own class or its featurizer."""
    cls = own_class(backbone)
    if callable(getattr(cls, "get_num_patches", None)):
        return int(cls.get_num_patches(backbone))
    prop = getattr(cls, "num_patches", None)
    if isinstance(prop, property):
        return int(prop.fget(backbone))
    if isinstance(getattr(backbone, "num_patches", None), int):
        return int(backbone.num_patches)
    embed = getattr(getattr(backbone, "featurizer", None), "patch_embed", None)
    n = getattr(embed, "num_patches", None)
    return int(n) if n is not None else None


# follows OpenVLA-OFT 213c5ff8 prismatic/extern/hf/modeling_prismatic.py get_num_images_in_input (MIT, see NOTICE).
def images_in_input(backbone: nn.Module) -> int:
    """Images the backbone encodes per sample now (OpenVLA-OFT: ``get_num_images_in_input()``), else 1."""
    cls = own_class(backbone)
    fn = getattr(cls, "get_num_images_in_input", None)
    return int(fn(backbone)) if callable(fn) else 1


def max_prefix_tokens(backbone: nn.Module) -> int:
    """The most prefix tokens (CLS, registers) one of the backbone's timm towers emits (``num_prefix_tokens``).

    OpenVLA's towers drop them before returning; a custom backbone may keep them (its output is then
    ``prefix + patches`` tokens). 0 when no tower declares any.
    """
    towers = (getattr(backbone, name, None) for name in ("featurizer", "fused_featurizer"))
    return max((int(getattr(t, "num_prefix_tokens", 0) or 0) for t in towers if t is not None), default=0)


def patch_grid(backbone: nn.Module) -> tuple[int, int] | None:
    """(rows, cols) of the featurizer's patch grid when timm exposes it, else None (inferred later)."""
    embed = getattr(getattr(backbone, "featurizer", None), "patch_embed", None)
    grid = getattr(embed, "grid_size", None)
    return (int(grid[0]), int(grid[1])) if grid is not None else None


def backbone_towers(backbone: nn.Module, purpose: str = "this reduction") -> list[nn.Module]:
    """The timm towers of an OpenVLA backbone, the first (``featurizer``) first; ``ValueError`` naming
    ``purpose`` when it has none or one is not a timm ViT (``blocks``, ``patch_embed``)."""
    towers = [t for t in (getattr(backbone, "featurizer", None), getattr(backbone, "fused_featurizer", None))
              if t is not None]
    if not towers or any(not hasattr(t, "blocks") or not hasattr(t, "patch_embed") for t in towers):
        raise ValueError(f"{type(backbone).__name__} has no timm featurizer / fused_featurizer towers; {purpose} "
                         "needs OpenVLA's backbone layout")
    return towers


# follows OpenVLA-OFT 213c5ff8 prismatic/extern/hf/modeling_prismatic.py predict_action (MIT, see NOTICE): its
# signature takes the action head and proprio projector, which OpenVLA's does not.
def is_oft_model(model: nn.Module) -> bool:
    """Whether ``model`` is OpenVLA-OFT's (its ``predict_action`` takes an ``action_head``): OFT reads its
    actions from every action position's hidden state in one parallel pass."""
    import inspect

    fn = getattr(type(model), "predict_action", None)
    if not callable(fn):
        return False
    try:
        return "action_head" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
