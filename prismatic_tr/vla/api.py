"""The public API of token reduction on an OpenVLA model: attach at a site, find, count, remove, persist.

Three sites (:mod:`prismatic_tr.vla.sites`): ``projector`` and ``vision`` share the backbone's slot (applying
one replaces the other), ``llm`` combines with either. Every handle is undoable: after removal the model is
bit-identical to before, and no ``state_dict`` key ever changes. The live settings are mirrored in
``vla.config.token_reduction`` (:mod:`prismatic_tr.vla.registry`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from torch import nn

from prismatic_tr.reducers.config import check_fraction
from prismatic_tr.vla.locate import find_vision_backbone, images_in_input, original_num_patches
from prismatic_tr.vla.registry import backbone_handle, llm_handle, set_config_before, sync_config
from prismatic_tr.vla.settings import DEFAULT_MERGE_SIZE, SITES, Setting, read_settings


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


def reduction_cut(vla: nn.Module) -> str:
    """Where the attached reductions cut on ``vla``, in blocks and layers actually run (e.g. "towers after 6/23,
    7/26 blocks; LLM after 2/8 layers"), or "none"."""
    cuts = [h.cut for h in (get_token_reduction(vla), get_token_reduction(vla, site="llm")) if h is not None]
    return "; ".join(cuts) or "none"


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


def attach_token_reduction(vla: nn.Module, settings: Setting) -> Any:
    """Attach ``settings`` to ``vla`` and return the handle. It replaces an earlier reduction in the same slot
    (``projector`` and ``vision`` share the backbone's slot; ``llm`` has its own)."""
    from prismatic_tr.vla.sites import HANDLES

    info = find_vision_backbone(vla)
    handle = HANDLES[settings.site](info, settings)  # builds and validates before anything is changed
    previous = llm_handle(info.model) if settings.site == "llm" else backbone_handle(info.backbone)
    if previous is not None:
        previous.remove()
    return handle.attach()


def apply_token_reduction_to_vla(
    vla: nn.Module,
    method: str | None = None,
    reduction_ratio: float = 0.5,
    spatial_merge_size: int = DEFAULT_MERGE_SIZE,
    keep_cls_token: bool = True,
    seed: int = 0,
    site: str = "projector",
    depth_fraction: float | None = None,
    num_queries: int = 4,
    positions: str = "original",
) -> nn.Module:
    """Reduce ``vla``'s visual tokens at ``site`` (see :mod:`prismatic_tr.vla.settings`); returns ``vla`` itself.

    site "projector" (default): between the vision backbone and the projector, ``method`` one of the reducers;
    "vision": inside the vision towers after ``depth_fraction`` of their depth (``method`` "attention", "norm" or a
    selecting reducer such as "diverse"); "llm": inside the language model before layer
    ``round(depth_fraction * layers)`` of the prefill (``method`` "attention"). ``method`` None takes the site's
    measured default (``prismatic_tr.vla.settings.DEFAULT_METHODS``). ``reduction_ratio`` (the seed design's
    keyword) is the fraction of visual tokens kept, the setting's ``keep_ratio``. ``positions``: "original" (default) gives every token the sequence position it has
    without reduction; "compact" (projector / vision only) renumbers the kept tokens (v0.2's behaviour). Works on
    the native model, OpenVLA's Hugging Face model (remote code) and OpenVLA-OFT's (not the llm site), wrapped by
    PEFT, DDP or ``torch.compile`` or not. Applying again replaces the earlier reduction of the same slot
    (projector / vision share one); the llm site combines with either. Bad settings raise ``ValueError``
    before the model is touched. Undo with :func:`remove_token_reduction`.
    """
    check_fraction("reduction_ratio", reduction_ratio)  # named as the caller wrote it
    settings = Setting.for_site(
        site, method, keep_ratio=reduction_ratio, spatial_merge_size=spatial_merge_size,
        keep_cls_token=keep_cls_token, seed=seed, depth_fraction=depth_fraction, num_queries=num_queries,
        positions=positions)
    attach_token_reduction(vla, settings)
    return vla


def apply_token_reduction_spec(vla: nn.Module, spec: str | Setting, seed: int = 0) -> nn.Module:
    """Attach the reduction that ``spec`` names, in the one grammar of :mod:`prismatic_tr.vla.spec` (e.g.
    ``"vision:diverse:0.1@0.25"``, ``"diverse:0.25+llm:attention:0.5@0.25"``; ``"none"``: no reduction) or as a
    :class:`Setting`, after removing any; returns ``vla``. The spec is checked in full before the model is touched."""
    from prismatic_tr.vla.spec import parse_setting

    reductions = (spec if isinstance(spec, Setting) else parse_setting(spec)).reductions(seed)
    remove_token_reduction(vla)
    for settings in reductions:
        attach_token_reduction(vla, settings)
    return vla


@contextlib.contextmanager
def reductions_attached(vla: nn.Module, settings: Sequence[Setting]) -> Iterator[list[Any]]:
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


def live_handles(vla: nn.Module) -> list[Any]:
    """The reductions attached to ``vla`` now (backbone slot first, then the llm site)."""
    info = find_vision_backbone(vla)
    return [h for h in (backbone_handle(info.backbone), llm_handle(info.model)) if h is not None and not h.removed]


def token_reduction_parameters(vla: nn.Module) -> list[nn.Parameter]:
    """Parameters the attached reductions own (the vision site's "learned" scorer), for the optimizer of a
    fine-tuning run; they live in no module of ``vla`` and in no ``state_dict``."""
    return [p for h in live_handles(vla) for p in h.scorer_parameters()]


def current_token_reduction(vla: nn.Module) -> list[Setting]:
    """The attached settings as they stand now (a learned scorer's current values included); also written to
    ``vla.config.token_reduction``, so a model saved next carries them."""
    sync_config(find_vision_backbone(vla).model)
    return [h.snapshot() for h in live_handles(vla)]


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
