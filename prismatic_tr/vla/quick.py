"""v0.2's one-line conveniences, kept as deprecated aliases of the one attach API
(:func:`prismatic_tr.vla.apply_token_reduction_to_vla`, :func:`prismatic_tr.vla.apply_token_reduction_spec`)."""

from __future__ import annotations

import warnings

from torch import nn

from prismatic_tr.vla.api import apply_token_reduction_to_vla, attach_token_reduction
from prismatic_tr.vla.settings import DEFAULT_MERGE_SIZE, DEFAULT_METHODS, Setting
from prismatic_tr.vla.sites import ReductionHandle


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


def apply_50_percent_topk_reduction(vla: nn.Module) -> nn.Module:
    """Deprecated: ``apply_token_reduction_spec(vla, "topk_magnitude:0.5")`` (the seed design's one-liner; on the
    bundled policy this score keeps the background and loses the task, docs/results/openvla.md)."""
    _deprecated("apply_50_percent_topk_reduction(vla)", 'apply_token_reduction_spec(vla, "topk_magnitude:0.5")')
    return apply_token_reduction_to_vla(vla, method="topk_magnitude", reduction_ratio=0.5)


def monkey_patch_vision_backbone_with_reduction(
    vla: nn.Module, method: str = DEFAULT_METHODS["projector"], reduction_ratio: float = 0.5,
    spatial_merge_size: int = DEFAULT_MERGE_SIZE, keep_cls_token: bool = True, seed: int = 0,
) -> ReductionHandle:
    """Deprecated: ``attach_token_reduction(vla, Setting(method, keep_ratio, ...))``; returns the handle, a context
    manager."""
    _deprecated("monkey_patch_vision_backbone_with_reduction", "attach_token_reduction(vla, Setting(...))")
    return attach_token_reduction(vla, Setting(method, reduction_ratio, spatial_merge_size,
                                               keep_cls_token=keep_cls_token, seed=seed))
