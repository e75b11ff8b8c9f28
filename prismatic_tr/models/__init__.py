"""The reference OpenVLA-architecture model, its processor and action tokenizer, and checkpoint loading."""

from .action_tokenizer import ActionTokenizer, normalize_actions, unnormalize_actions
from .adapter import OpenVLAAdapter
from .build import build_vla, make_config
from .config import (
    IGNORE_INDEX,
    PRESETS,
    SYNTHETIC_NORM_STATS,
    VISION_BACKBONE_IDS,
    ReferenceOpenVLAConfig,
)
from .generation import GenerateOutput
from .loading import load_vla
from .modeling import PrismaticCausalLMOutput, ReferenceOpenVLA
from .processor import (
    PrismaticImageTransform,
    PrismaticProcessor,
    build_processor,
    build_prompt,
    build_tokenizer,
)
from .vision import ReferenceProjector, ReferenceVisionBackbone

__all__ = [
    "IGNORE_INDEX",
    "PRESETS",
    "SYNTHETIC_NORM_STATS",
    "VISION_BACKBONE_IDS",
    "ActionTokenizer",
    "GenerateOutput",
    "OpenVLAAdapter",
    "PrismaticCausalLMOutput",
    "PrismaticImageTransform",
    "PrismaticProcessor",
    "ReferenceOpenVLA",
    "ReferenceOpenVLAConfig",
    "ReferenceProjector",
    "ReferenceVisionBackbone",
    "build_processor",
    "build_prompt",
    "build_tokenizer",
    "build_vla",
    "load_vla",
    "make_config",
    "normalize_actions",
    "unnormalize_actions",
]
