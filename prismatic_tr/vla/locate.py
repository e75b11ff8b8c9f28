"""Find the vision backbone of an OpenVLA model, through PEFT, DDP and ``torch.compile`` wrappers
(:mod:`prismatic_tr.models.wrappers`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from prismatic_tr.models.wrappers import unwrap_vla

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


def backbone_towers(backbone: nn.Module, purpose: str = "this reduction") -> list[nn.Module]:
    """The timm towers of an OpenVLA backbone, the first (``featurizer``) first; ``ValueError`` naming
    ``purpose`` when it has none or one is not a timm ViT (``blocks``, ``patch_embed``)."""
    towers = [t for t in (getattr(backbone, "featurizer", None), getattr(backbone, "fused_featurizer", None))
              if t is not None]
    if not towers or any(not hasattr(t, "blocks") or not hasattr(t, "patch_embed") for t in towers):
        raise ValueError(f"{type(backbone).__name__} has no timm featurizer / fused_featurizer towers; {purpose} "
                         "needs OpenVLA's backbone layout")
    return towers
