"""``build_vla``: a randomly initialised reference OpenVLA model from a preset and a vision backbone id."""

from __future__ import annotations

import copy

import torch

from .config import (
    PRESETS,
    SYNTHETIC_NORM_STATS,
    VISION_BACKBONE_IDS,
    ReferenceOpenVLAConfig,
    check_choice,
)
from .init_utils import building_on_meta, materialize_parameters_, parameters_on_meta
from .modeling import ReferenceOpenVLA


def make_config(
    preset: str = "tiny", vision_backbone_id: str = "dinosiglip-vit-so-224px"
) -> ReferenceOpenVLAConfig:
    """Config for ``preset`` x ``vision_backbone_id`` with the synthetic "bridge_orig" statistics."""
    check_choice("preset", preset, PRESETS)
    check_choice("vision_backbone_id", vision_backbone_id, VISION_BACKBONE_IDS)
    return ReferenceOpenVLAConfig(
        preset=preset,
        vision_backbone_id=vision_backbone_id,
        norm_stats=copy.deepcopy(SYNTHETIC_NORM_STATS),
    )


def build_vla(
    preset: str = "tiny",
    vision_backbone_id: str = "dinosiglip-vit-so-224px",
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    seed: int = 0,
) -> ReferenceOpenVLA:
    """Build a ``ReferenceOpenVLA`` in eval mode with random weights drawn from ``seed``.

    Presets: "tiny" (tiny ViTs with the real 256-token geometry, Llama h64 x 2 layers, vocab 1024),
    "cpu-bench" (real DINOv2-L / SigLIP-so400m, Llama h2048 x 8 layers, vocab 32000 -> 32064),
    "openvla-7b" (real ViTs + Llama-2-7B sizes; build it under ``torch.device("meta")`` off a GPU).
    The global RNG state is left untouched. "tiny" uses timm's / transformers' own init; the big presets
    are materialised directly on ``device`` in ``dtype`` with N(0, 0.02) weights (see ``init_utils``).
    """
    config = make_config(preset, vision_backbone_id)
    on_meta = building_on_meta()
    if PRESETS[preset].tiny_vision and not on_meta:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = ReferenceOpenVLA(config)  # timm / transformers' own init
        return model.to(device=device, dtype=dtype).eval()
    with parameters_on_meta():
        model = ReferenceOpenVLA(config)
    if on_meta:
        return model.to("meta").eval()
    materialize_parameters_(model, device or "cpu", dtype or torch.float32, seed)
    return model.to(device=device, dtype=dtype).eval()
