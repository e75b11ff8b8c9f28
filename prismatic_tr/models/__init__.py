"""The native OpenVLA model and OpenVLA-OFT model (random-weight presets and real checkpoints), its processor, action
tokenizer, and checkpoint loading (natively, or through OpenVLA's remote code)."""

from .action_tokenizer import ActionTokenizer, normalize_actions, unnormalize_actions
from .adapter import OpenVLAAdapter
from .backbones import LLM_BACKBONES, VISION_BACKBONES
from .build import build_oft_vla, build_vla
from .config import (
    IGNORE_INDEX,
    PRESETS,
    SYNTHETIC_NORM_STATS,
    VISION_BACKBONE_IDS,
    NativeOpenVLAConfig,
    make_config,
)
from .generation import GenerateOutput
from .image_processing import ImageTransform
from .loading import RemoteCodeError, load_vla
from .modeling import NativeOpenVLA, PrismaticCausalLMOutput
from .oft import NativeOpenVLAOFT
from .oft_config import OFT_PLATFORMS, NativeOpenVLAOFTConfig, OFTSettings
from .processor import PrismaticProcessor, build_processor
from .tokenizer import build_prompt, build_tokenizer
from .vision import NativeProjector, NativeVisionBackbone

# v0.1 names
ReferenceOpenVLA = NativeOpenVLA
ReferenceOpenVLAConfig = NativeOpenVLAConfig
PrismaticImageTransform = ImageTransform

__all__ = [
    "IGNORE_INDEX",
    "LLM_BACKBONES",
    "PRESETS",
    "SYNTHETIC_NORM_STATS",
    "VISION_BACKBONES",
    "VISION_BACKBONE_IDS",
    "ActionTokenizer",
    "GenerateOutput",
    "ImageTransform",
    "NativeOpenVLA",
    "NativeOpenVLAConfig",
    "NativeOpenVLAOFT",
    "NativeOpenVLAOFTConfig",
    "OFTSettings",
    "OFT_PLATFORMS",
    "NativeProjector",
    "NativeVisionBackbone",
    "OpenVLAAdapter",
    "PrismaticCausalLMOutput",
    "PrismaticImageTransform",
    "PrismaticProcessor",
    "ReferenceOpenVLA",
    "ReferenceOpenVLAConfig",
    "RemoteCodeError",
    "build_oft_vla",
    "build_processor",
    "build_prompt",
    "build_tokenizer",
    "build_vla",
    "load_vla",
    "make_config",
    "normalize_actions",
    "unnormalize_actions",
]
