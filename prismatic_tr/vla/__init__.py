"""Token reduction on an OpenVLA model at three sites (projector, inside the vision towers, inside the language
model): locate, attach, remove, persist; every site keeps the kept tokens' original sequence positions."""

from prismatic_tr.vla.api import (
    apply_token_reduction_from_config,
    apply_token_reduction_spec,
    apply_token_reduction_to_vla,
    attach_token_reduction,
    current_token_reduction,
    get_token_reduction,
    live_handles,
    reduction_cut,
    reductions_attached,
    remove_token_reduction,
    token_reduction_parameters,
    visual_token_count,
)
from prismatic_tr.vla.locate import BackboneInfo, find_vision_backbone, unwrap_vla
from prismatic_tr.vla.quick import (
    apply_50_percent_topk_reduction,
    monkey_patch_vision_backbone_with_reduction,
)
from prismatic_tr.vla.scope import CallRecord, reduction_call
from prismatic_tr.vla.settings import (
    CONFIG_KEY,
    POSITIONS,
    SITES,
    Setting,
    TokenReductionSettings,
    read_settings,
)
from prismatic_tr.vla.sites import LLMSiteHandle, ProjectorSiteHandle, ReductionHandle, VisionSiteHandle
from prismatic_tr.vla.spec import parse_setting, setting_of

__all__ = [
    "CONFIG_KEY",
    "POSITIONS",
    "SITES",
    "BackboneInfo",
    "CallRecord",
    "LLMSiteHandle",
    "ProjectorSiteHandle",
    "ReductionHandle",
    "Setting",
    "TokenReductionSettings",
    "VisionSiteHandle",
    "apply_50_percent_topk_reduction",
    "apply_token_reduction_from_config",
    "apply_token_reduction_spec",
    "apply_token_reduction_to_vla",
    "attach_token_reduction",
    "current_token_reduction",
    "find_vision_backbone",
    "get_token_reduction",
    "live_handles",
    "monkey_patch_vision_backbone_with_reduction",
    "parse_setting",
    "read_settings",
    "reduction_call",
    "reduction_cut",
    "setting_of",
    "reductions_attached",
    "remove_token_reduction",
    "token_reduction_parameters",
    "unwrap_vla",
    "visual_token_count",
]
