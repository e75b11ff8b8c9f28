"""Attach a :class:`TokenReducer` between an OpenVLA vision backbone and its projector, undoably.

The reducer runs as a forward hook on ``vision_backbone``: the backbone's output (B, N, D) is replaced by
the reduced (B, K, D) before the projector sees it. Nothing else in the model changes: no parameter,
buffer or ``state_dict`` key is added, the model's own ``forward`` code is untouched, and the backbone's
reported patch count (``get_num_patches()`` / ``num_patches``) follows the reduction while attached.
``vision_backbone.forward(px)`` (which bypasses hooks) still returns the unreduced features.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.reducers import TokenReducer
from prismatic_tr.vla.locate import (
    BackboneInfo,
    find_vision_backbone,
    images_in_input,
    original_num_patches,
    patch_grid,
)
from prismatic_tr.vla.settings import CONFIG_KEY, TokenReductionSettings, read_settings

_HANDLE_ATTR = "_prismatic_tr_handle"
_ORIG_CLASS_ATTR = "_prismatic_tr_original_class"
_MISSING = object()


class ReductionHandle:
    """A live reduction on one VLA. ``remove()`` (or leaving a ``with`` block) restores the model exactly."""

    def __init__(self, info: BackboneInfo, settings: TokenReductionSettings) -> None:
        self.info = info
        self.settings = settings
        self.num_images = images_in_input(info.backbone)
        per_image = original_num_patches(info.backbone)
        # Patch tokens of all images together (OFT-style backbones concatenate several images' tokens).
        self.num_patches = per_image * self.num_images if per_image is not None else None
        grid = patch_grid(info.backbone) if settings.method == "spatial_pool" else None
        if grid is not None and self.num_patches is not None and grid[0] * grid[1] != self.num_patches:
            grid = None
        self.reducer = TokenReducer(settings.reducer_config(grid_size=grid))
        if self.num_patches is not None:
            self.reducer.output_tokens(self.num_patches)  # a grid that does not fit fails here, not mid-forward
        self._by_prefix: dict[int, TokenReducer] = {0: self.reducer}
        self._hook: Any = None
        self._config = getattr(info.model, "config", None)
        self._saved_config: Any = _MISSING
        self.removed = True

    @property
    def backbone(self) -> nn.Module:
        return self.info.backbone

    def reduced_num_patches(self) -> int:
        """Patch tokens the projector receives while attached (all images of a sample together)."""
        if self.num_patches is None:
            raise ValueError("the backbone does not report its patch count, so the reduced count is unknown")
        return self.reducer.output_tokens(self.num_patches)

    def reduced_num_patches_per_image(self) -> int:
        """What ``get_num_patches()`` reports while attached: the reduced count over the images per sample.

        OpenVLA-OFT multiplies ``get_num_patches()`` by ``get_num_images_in_input()``; this keeps that product
        equal to the number of tokens the projector really receives (rounded down if the images do not split it
        evenly).
        """
        return max(1, self.reduced_num_patches() // self.num_images)

    def reducer_for(self, num_tokens: int) -> TokenReducer:
        """The reducer for a backbone output of ``num_tokens`` tokens (prefix tokens protected if any)."""
        prefix = 0
        if self.settings.keep_cls_token and self.num_patches is not None and num_tokens > self.num_patches:
            prefix = num_tokens - self.num_patches
        if prefix not in self._by_prefix:
            self._by_prefix[prefix] = TokenReducer(self.settings.reducer_config(num_prefix_tokens=prefix))
        return self._by_prefix[prefix]

    def _forward_hook(self, module: nn.Module, args: Any, output: Any) -> torch.Tensor:
        if not isinstance(output, torch.Tensor) or output.dim() != 3:
            raise ValueError(
                f"token reduction expects the vision backbone to return a (B, N, D) tensor, got {type(output).__name__}"
            )
        return self.reducer_for(output.shape[1])(output)

    def attach(self) -> ReductionHandle:
        backbone = self.backbone
        self._hook = backbone.register_forward_hook(self._forward_hook)
        _swap_in_count_class(backbone)
        object.__setattr__(backbone, _HANDLE_ATTR, self)
        if self._config is not None:
            self._saved_config = getattr(self._config, CONFIG_KEY, _MISSING)
            setattr(self._config, CONFIG_KEY, self.settings.to_dict())
        self.removed = False
        return self

    def remove(self) -> None:
        """Detach: hook, class and config go back to what they were. Safe to call twice."""
        if self.removed:
            return
        self._hook.remove()
        backbone = self.backbone
        original = backbone.__dict__.pop(_ORIG_CLASS_ATTR, None)
        if original is not None:
            backbone.__class__ = original
        backbone.__dict__.pop(_HANDLE_ATTR, None)
        if self._config is not None:
            if self._saved_config is _MISSING:
                if CONFIG_KEY in vars(self._config):
                    delattr(self._config, CONFIG_KEY)
            else:
                setattr(self._config, CONFIG_KEY, self._saved_config)
        self.removed = True

    def __enter__(self) -> ReductionHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "removed" if self.removed else "attached"
        return f"ReductionHandle({self.reducer.extra_repr()}, {state})"


def _swap_in_count_class(backbone: nn.Module) -> None:
    """Give ``backbone`` a subclass whose patch count reports the reduced number (undone by ``remove``)."""
    cls = type(backbone)
    attrs: dict[str, Any] = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
    if callable(getattr(cls, "get_num_patches", None)):
        attrs["get_num_patches"] = lambda self: getattr(self, _HANDLE_ATTR).reduced_num_patches_per_image()
    if isinstance(getattr(cls, "num_patches", None), property) or isinstance(vars(backbone).get("num_patches"), int):
        attrs["num_patches"] = property(lambda self: getattr(self, _HANDLE_ATTR).reduced_num_patches())
    if "get_num_patches" not in attrs and "num_patches" not in attrs:
        return
    object.__setattr__(backbone, _ORIG_CLASS_ATTR, cls)
    backbone.__class__ = type(cls.__name__, (cls,), attrs)


def get_token_reduction(vla: nn.Module) -> ReductionHandle | None:
    """The reduction attached to ``vla``'s vision backbone, or None."""
    return getattr(find_vision_backbone(vla).backbone, _HANDLE_ATTR, None)


def attach_token_reduction(vla: nn.Module, settings: TokenReductionSettings) -> ReductionHandle:
    """Attach ``settings`` to ``vla`` (replacing any earlier reduction) and return the handle."""
    info = find_vision_backbone(vla)
    handle = ReductionHandle(info, settings)  # builds and validates before anything is changed
    previous = getattr(info.backbone, _HANDLE_ATTR, None)
    if previous is not None:
        previous.remove()
    return handle.attach()


def apply_token_reduction_to_vla(
    vla: nn.Module,
    method: str = "topk_magnitude",
    reduction_ratio: float = 0.5,
    spatial_merge_size: int = 2,
    keep_cls_token: bool = True,
    seed: int = 0,
) -> nn.Module:
    """Insert a token reducer between ``vla``'s vision backbone and projector; returns ``vla`` itself.

    Works on the Hugging Face OpenVLA model (remote code), the native prismatic model, the reference
    model of :mod:`prismatic_tr.models`, and any of them wrapped by PEFT, DDP or ``torch.compile``.
    Applying again replaces the earlier reduction. Bad settings raise ``ValueError`` before the model is
    touched. Undo with :func:`remove_token_reduction`.
    """
    settings = TokenReductionSettings(method, reduction_ratio, spatial_merge_size, keep_cls_token, seed)
    attach_token_reduction(vla, settings)
    return vla


def remove_token_reduction(vla: nn.Module) -> bool:
    """Remove the reduction from ``vla``; returns whether there was one."""
    handle = get_token_reduction(vla)
    if handle is None:
        return False
    handle.remove()
    return True


def apply_token_reduction_from_config(vla: nn.Module) -> ReductionHandle | None:
    """Re-apply the settings saved in ``vla.config.token_reduction`` (e.g. after ``from_pretrained``).

    Returns the handle, or None when the config holds no settings. Removing this handle sets
    ``config.token_reduction`` to None, so a model saved afterwards loads without reduction.
    """
    info = find_vision_backbone(vla)
    settings = read_settings(getattr(info.model, "config", None))
    if settings is None:
        return None
    handle = attach_token_reduction(vla, settings)
    handle._saved_config = None  # the config described this reduction: removing it clears the record
    return handle
