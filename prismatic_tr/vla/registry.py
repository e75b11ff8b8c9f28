"""Where live reductions are kept on a model, the patch count the backbone reports, and the config record.

Slots: the vision backbone holds one handle (site ``projector`` or ``vision``: both change what the projector
receives) in ``_prismatic_tr_handle``; the VLA holds the ``llm`` site's handle. None of this is a submodule,
parameter or buffer, so ``state_dict`` never changes. ``vla.config.token_reduction`` mirrors the live
handles; the value found before the first one attached comes back when the last one is removed.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from prismatic_tr.vla.locate import ORIGINAL_CLASS_ATTR
from prismatic_tr.vla.settings import CONFIG_KEY

BACKBONE_HANDLE_ATTR = "_prismatic_tr_handle"
LLM_HANDLE_ATTR = "_prismatic_tr_llm_handle"
_CONFIG_BEFORE_ATTR = "_prismatic_tr_config_before"
_MISSING = object()


def backbone_handle(backbone: nn.Module) -> Any:
    """The handle in the backbone's slot (projector or vision site), or None."""
    return backbone.__dict__.get(BACKBONE_HANDLE_ATTR)


def llm_handle(model: nn.Module) -> Any:
    """The llm site's handle on the VLA, or None."""
    return model.__dict__.get(LLM_HANDLE_ATTR)


def _reduced_count(backbone: nn.Module) -> int:
    return backbone_handle(backbone).reduced_num_patches_per_image()


def swap_in_count_class(backbone: nn.Module, count_known: bool) -> None:
    """Give ``backbone`` a subclass whose patch count reports the reduced number (undone by
    :func:`restore_count_class`).

    ``get_num_patches()`` is overridden, or added when the class lacks it (OpenVLA's own
    ``PrismaticVisionBackbone``) and the count is known; a ``num_patches`` property or int is overridden.
    Both report patch tokens per image, as the originals do.
    """
    if not count_known:
        return
    cls = type(backbone)
    attrs: dict[str, Any] = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
                             "get_num_patches": _reduced_count}
    if isinstance(getattr(cls, "num_patches", None), property) or isinstance(vars(backbone).get("num_patches"), int):
        attrs["num_patches"] = property(_reduced_count)
    object.__setattr__(backbone, ORIGINAL_CLASS_ATTR, cls)
    backbone.__class__ = type(cls.__name__, (cls,), attrs)


def restore_count_class(backbone: nn.Module) -> None:
    """Undo :func:`swap_in_count_class` and empty the backbone's slot."""
    original = backbone.__dict__.pop(ORIGINAL_CLASS_ATTR, None)
    if original is not None:
        backbone.__class__ = original
    backbone.__dict__.pop(BACKBONE_HANDLE_ATTR, None)


def _live(model: nn.Module) -> list[Any]:
    backbone = getattr(model, "vision_backbone", None)
    handles = [backbone_handle(backbone) if backbone is not None else None, llm_handle(model)]
    return [h for h in handles if h is not None and not h.removed]


def sync_config(model: nn.Module) -> None:
    """Write the live handles' settings to ``model.config.token_reduction`` (one dict, or a list), or put back
    the value found before the first handle attached when none is left."""
    config = getattr(model, "config", None)
    if config is None:
        return
    handles = _live(model)
    if handles:
        if _CONFIG_BEFORE_ATTR not in model.__dict__:
            model.__dict__[_CONFIG_BEFORE_ATTR] = getattr(config, CONFIG_KEY, _MISSING)
        dicts = [h.snapshot().to_dict() for h in handles]
        setattr(config, CONFIG_KEY, dicts[0] if len(dicts) == 1 else dicts)
        return
    before = model.__dict__.pop(_CONFIG_BEFORE_ATTR, _MISSING)
    if before is _MISSING:
        if CONFIG_KEY in vars(config):
            delattr(config, CONFIG_KEY)
    else:
        setattr(config, CONFIG_KEY, before)


def claim_backbone_slot(handle: Any, count_known: bool = True) -> None:
    """Put ``handle`` in its backbone's slot, report its count from there, mark it live, mirror the config."""
    swap_in_count_class(handle.backbone, count_known)
    object.__setattr__(handle.backbone, BACKBONE_HANDLE_ATTR, handle)
    handle.removed = False
    sync_config(handle.info.model)


def release_backbone_slot(handle: Any) -> None:
    """Undo :func:`claim_backbone_slot`."""
    restore_count_class(handle.backbone)
    handle.removed = True
    sync_config(handle.info.model)


def set_config_before(model: nn.Module, value: Any) -> None:
    """What ``config.token_reduction`` becomes once every live handle is removed."""
    if _live(model):
        model.__dict__[_CONFIG_BEFORE_ATTR] = value
