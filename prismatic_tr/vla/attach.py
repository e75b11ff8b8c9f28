"""Attach a :class:`TokenReducer` between an OpenVLA vision backbone and its projector, undoably.

The reducer runs as a forward hook on ``vision_backbone``: the backbone's output (B, n * P, D) (n images of
P patch tokens; n = 1 for OpenVLA, any n for OpenVLA-OFT) is replaced by (B, n * K, D), each image reduced on
its own (:mod:`prismatic_tr.vla.layout`), before the projector sees it. Nothing else in the model changes: no
parameter, buffer or ``state_dict`` key is added and the model's own ``forward`` code is untouched. While
attached the backbone's ``get_num_patches()`` (added if its class lacks one, as OpenVLA's own
``PrismaticVisionBackbone`` does) and a ``num_patches`` property report K per image; after ``remove()`` the
backbone object is exactly as before (class, ``__dict__``, hooks). ``vision_backbone.forward(px)`` (which
bypasses hooks) still returns the unreduced features.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.reducers import TokenReducer
from prismatic_tr.vla.layout import PerImageReducer, TokenLayout, token_layout
from prismatic_tr.vla.locate import (
    ORIGINAL_CLASS_ATTR,
    BackboneInfo,
    find_vision_backbone,
    images_in_input,
    max_prefix_tokens,
    original_num_patches,
    patch_grid,
)
from prismatic_tr.vla.settings import CONFIG_KEY, TokenReductionSettings, read_settings

_HANDLE_ATTR = "_prismatic_tr_handle"
_MISSING = object()


class ReductionHandle:
    """A live reduction on one VLA. ``remove()`` (or leaving a ``with`` block) restores the model exactly.

    Counts, per sample (see :mod:`prismatic_tr.vla.layout`): every image is reduced on its own from P to K
    patch tokens. ``reduced_num_patches_per_image()`` is K, which the backbone's ``get_num_patches()`` (and a
    native backbone's ``num_patches``) report while attached, as they report P (per image) without reduction;
    ``reduced_num_patches()`` is K times the images per sample, the patch tokens the projector receives.
    """

    def __init__(self, info: BackboneInfo, settings: TokenReductionSettings) -> None:
        self.info = info
        self.settings = settings
        # Patch tokens of one image without reduction (None: the backbone does not say; one image assumed).
        self.patches_per_image = original_num_patches(info.backbone)
        self.max_prefix = max_prefix_tokens(info.backbone)
        grid = patch_grid(info.backbone) if settings.method == "spatial_pool" else None
        if grid is not None and grid[0] * grid[1] != self.patches_per_image:
            grid = None
        self.reducer = TokenReducer(settings.reducer_config(grid_size=grid))
        if self.patches_per_image is not None:
            self.reducer.output_tokens(self.patches_per_image)  # a grid that does not fit fails here, not mid-forward
        self._by_prefix: dict[int, TokenReducer] = {0: self.reducer}
        self._by_layout: dict[TokenLayout, PerImageReducer] = {}
        self._hook: Any = None
        self._config = getattr(info.model, "config", None)
        self._saved_config: Any = _MISSING
        self.removed = True

    @property
    def backbone(self) -> nn.Module:
        return self.info.backbone

    def reduced_num_patches_per_image(self) -> int:
        """K: patch tokens each image keeps (what ``get_num_patches()`` reports while attached)."""
        if self.patches_per_image is None:
            raise ValueError("the backbone does not report its patch count, so the reduced count is unknown")
        return self.reducer.output_tokens(self.patches_per_image)

    def reduced_num_patches(self) -> int:
        """Patch tokens per sample the projector receives: K x the images the backbone is set to encode now.

        The image count is read from the backbone each call (OpenVLA-OFT: ``get_num_images_in_input()``), so
        this equals ``get_num_patches() * get_num_images_in_input()``, OFT's own count. Prefix tokens that a
        custom backbone emits (and the reduction keeps) come on top, as they do without reduction.
        """
        return self.reduced_num_patches_per_image() * images_in_input(self.backbone)

    def layout(self, num_tokens: int) -> TokenLayout:
        """How a backbone output of ``num_tokens`` tokens per sample splits into prefix and images."""
        return token_layout(num_tokens, self.patches_per_image, self.max_prefix, self.settings.keep_cls_token)

    def reducer_for(self, num_tokens: int) -> PerImageReducer:
        """The module that reduces a backbone output of ``num_tokens`` tokens per sample, image by image.

        ``ValueError`` when ``num_tokens`` does not split into whole images (see :func:`token_layout`).
        """
        lay = self.layout(num_tokens)
        if lay not in self._by_layout:
            if lay.prefix not in self._by_prefix:  # prefix > 0: one image of P patches after the prefix
                cfg = self.settings.reducer_config(num_prefix_tokens=lay.prefix, grid_size=self.reducer.cfg.grid_size)
                self._by_prefix[lay.prefix] = TokenReducer(cfg)
            self._by_layout[lay] = PerImageReducer(self._by_prefix[lay.prefix], lay)
        return self._by_layout[lay]

    def _forward_hook(self, module: nn.Module, args: Any, output: Any) -> torch.Tensor:
        if not isinstance(output, torch.Tensor) or output.dim() != 3:
            raise ValueError(
                f"token reduction expects the vision backbone to return a (B, N, D) tensor, got {type(output).__name__}"
            )
        return self.reducer_for(output.shape[1])(output)

    def attach(self) -> ReductionHandle:
        backbone = self.backbone
        self._hook = backbone.register_forward_hook(self._forward_hook)
        _swap_in_count_class(backbone, self.patches_per_image is not None)
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
        original = backbone.__dict__.pop(ORIGINAL_CLASS_ATTR, None)
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


def _reduced_count(backbone: nn.Module) -> int:
    return getattr(backbone, _HANDLE_ATTR).reduced_num_patches_per_image()


def _swap_in_count_class(backbone: nn.Module, count_known: bool) -> None:
    """Give ``backbone`` a subclass whose patch count reports the reduced number (undone by ``remove``).

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


def get_token_reduction(vla: nn.Module) -> ReductionHandle | None:
    """The reduction attached to ``vla``'s vision backbone, or None."""
    return getattr(find_vision_backbone(vla).backbone, _HANDLE_ATTR, None)


def visual_token_count(vla: nn.Module) -> int:
    """Patch tokens per sample that ``vla``'s projector receives now, with or without a reduction attached.

    Per image count (reduced K, or the backbone's unreduced P) x the images the backbone is set to encode
    (OpenVLA-OFT's ``get_num_images_in_input()``, else 1). Works on backbones without ``get_num_patches()``
    (OpenVLA's remote code). ``ValueError`` when the backbone does not report its patch count.
    """
    handle = get_token_reduction(vla)
    if handle is not None:
        return handle.reduced_num_patches()
    backbone = find_vision_backbone(vla).backbone
    per_image = original_num_patches(backbone)
    if per_image is None:
        raise ValueError(f"{type(backbone).__name__} does not report its patch count (no get_num_patches(), "
                         "num_patches or featurizer.patch_embed.num_patches)")
    return per_image * images_in_input(backbone)


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
