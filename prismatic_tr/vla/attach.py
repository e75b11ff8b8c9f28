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

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from prismatic_tr.reducers import TokenReducer
from prismatic_tr.vla.layout import PerImageReducer, TokenLayout, token_layout
from prismatic_tr.vla.locate import (
    BackboneInfo,
    find_vision_backbone,
    images_in_input,
    max_prefix_tokens,
    original_num_patches,
    patch_grid,
)
from prismatic_tr.vla.registry import (
    backbone_handle,
    claim_backbone_slot,
    llm_handle,
    release_backbone_slot,
    set_config_before,
)
from prismatic_tr.vla.settings import SITES, TokenReductionSettings, read_settings


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
        self._hook = self.backbone.register_forward_hook(self._forward_hook)
        claim_backbone_slot(self, self.patches_per_image is not None)
        return self

    def remove(self) -> None:
        """Detach: hook, class and config go back to what they were. Safe to call twice."""
        if self.removed:
            return
        self._hook.remove()
        release_backbone_slot(self)

    def __enter__(self) -> ReductionHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "removed" if self.removed else "attached"
        return f"ReductionHandle({self.reducer.extra_repr()}, {state})"


def get_token_reduction(vla: nn.Module, site: str | None = None) -> Any:
    """The live handle: by default the one on the vision backbone (site ``projector`` or ``vision``); with
    ``site`` the handle of that site, or None."""
    if site is not None and site not in SITES:
        raise ValueError(f"site={site!r} is not allowed; use one of {SITES}")
    info = find_vision_backbone(vla)
    if site == "llm":
        return llm_handle(info.model)
    handle = backbone_handle(info.backbone)
    return handle if site is None or (handle is not None and handle.settings.site == site) else None


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


def attach_token_reduction(vla: nn.Module, settings: TokenReductionSettings) -> Any:
    """Attach ``settings`` to ``vla`` and return the handle. It replaces an earlier reduction in the same slot
    (``projector`` and ``vision`` share the backbone's slot; ``llm`` has its own)."""
    from prismatic_tr.vla.sites import LLMSiteHandle, VisionSiteHandle

    info = find_vision_backbone(vla)
    kinds = {"projector": ReductionHandle, "vision": VisionSiteHandle, "llm": LLMSiteHandle}
    handle = kinds[settings.site](info, settings)  # builds and validates before anything is changed
    previous = llm_handle(info.model) if settings.site == "llm" else backbone_handle(info.backbone)
    if previous is not None:
        previous.remove()
    return handle.attach()


def apply_token_reduction_to_vla(
    vla: nn.Module,
    method: str | None = None,
    reduction_ratio: float = 0.5,
    spatial_merge_size: int = 2,
    keep_cls_token: bool = True,
    seed: int = 0,
    site: str = "projector",
    depth_fraction: float | None = None,
    num_queries: int = 4,
) -> nn.Module:
    """Reduce ``vla``'s visual tokens at ``site`` (see :mod:`prismatic_tr.vla.settings`); returns ``vla`` itself.

    site "projector" (default): between the vision backbone and the projector, ``method`` one of the reducers
    (default ``topk_magnitude``); "vision": inside the vision towers after ``depth_fraction`` of their depth
    (``method`` "attention" (default) or "norm"); "llm": inside the language model before layer
    ``round(depth_fraction * layers)`` of the prefill (``method`` "attention"). ``reduction_ratio`` is the fraction
    of visual tokens kept. Works on the Hugging Face OpenVLA model (remote code), the native model, and either
    wrapped by PEFT, DDP or ``torch.compile``. Applying again replaces the earlier reduction of the same slot
    (projector / vision share one); the llm site combines with either. Bad settings raise ``ValueError``
    before the model is touched. Undo with :func:`remove_token_reduction`.
    """
    settings = TokenReductionSettings.for_site(
        site, method, reduction_ratio=reduction_ratio, spatial_merge_size=spatial_merge_size,
        keep_cls_token=keep_cls_token, seed=seed, depth_fraction=depth_fraction, num_queries=num_queries)
    attach_token_reduction(vla, settings)
    return vla


@contextlib.contextmanager
def reductions_attached(vla: nn.Module, settings: Sequence[TokenReductionSettings]) -> Iterator[list[Any]]:
    """Attach every one of ``settings`` (one per site) for the block, after removing any reduction; remove
    them all on exit. Yields the handles (none for an empty list: the unreduced model)."""
    remove_token_reduction(vla)
    try:
        yield [attach_token_reduction(vla, s) for s in settings]
    finally:
        remove_token_reduction(vla)


def remove_token_reduction(vla: nn.Module, site: str | None = None) -> bool:
    """Remove every reduction from ``vla`` (or only ``site``'s); returns whether there was one."""
    if site is not None and site not in SITES:
        raise ValueError(f"site={site!r} is not allowed; use one of {SITES}")
    info = find_vision_backbone(vla)
    handles = [backbone_handle(info.backbone), llm_handle(info.model)]
    found = False
    for handle in handles:
        if handle is not None and (site is None or handle.settings.site == site):
            handle.remove()
            found = True
    return found


def apply_token_reduction_from_config(vla: nn.Module) -> Any:
    """Re-apply the settings saved in ``vla.config.token_reduction`` (e.g. after ``from_pretrained``).

    Returns the handle (the backbone's when several sites are saved), or None when the config holds no
    settings. Removing the reductions then sets ``config.token_reduction`` to None, so a model saved
    afterwards loads without reduction.
    """
    info = find_vision_backbone(vla)
    handles = [attach_token_reduction(vla, s) for s in read_settings(getattr(info.model, "config", None))]
    if not handles:
        return None
    set_config_before(info.model, None)  # the config described these reductions: removing them clears it
    return next((h for h in handles if h.settings.site != "llm"), handles[0])
