"""One-line conveniences for quick experiments; both are undoable like everything else."""

from __future__ import annotations

from torch import nn

from prismatic_tr.vla.api import apply_token_reduction_to_vla, attach_token_reduction
from prismatic_tr.vla.settings import DEFAULT_METHODS, TokenReductionSettings
from prismatic_tr.vla.sites import ReductionHandle


def apply_50_percent_topk_reduction(vla: nn.Module) -> nn.Module:
    """Keep the 50% of visual tokens with the largest L2 norm; returns ``vla`` (undo: ``remove_token_reduction``).

    The seed design's one-liner, kept by name; on the bundled tabletop policy this score keeps background tokens
    and loses the task (README, "which tokens to keep"): ``apply_token_reduction_to_vla(vla)`` takes the measured
    default instead."""
    return apply_token_reduction_to_vla(vla, method="topk_magnitude", reduction_ratio=0.5)


def monkey_patch_vision_backbone_with_reduction(
    vla: nn.Module,
    method: str = DEFAULT_METHODS["projector"],
    reduction_ratio: float = 0.5,
    spatial_merge_size: int = 2,
    keep_cls_token: bool = True,
    seed: int = 0,
) -> ReductionHandle:
    """Patch the vision backbone so it returns reduced tokens; returns the handle.

    Use it as a context manager for a scoped experiment::

        with monkey_patch_vision_backbone_with_reduction(vla, "spatial_pool") as handle:
            action = vla.predict_action(**inputs, unnorm_key="bridge_orig")
        # the model is exactly as before here
    """
    settings = TokenReductionSettings(method, reduction_ratio, spatial_merge_size, keep_cls_token, seed)
    return attach_token_reduction(vla, settings)
