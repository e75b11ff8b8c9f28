"""Tiny random-weight models built by the reference clients' own classes (OpenVLA's and OpenVLA-OFT's code).

Import the client modules with :mod:`helpers.reference_clients`, then build with :func:`build_reference_vla`:
the real ``OpenVLAForActionPrediction`` / ``PrismaticVisionBackbone`` classes, timm towers at tiny sizes, and
a two-layer Llama with OpenVLA's padded vocabulary (32064), so token ids and action bins are the real ones.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
from helpers.openvla_checkpoint import TEXT_CONFIG
from helpers.reference_clients import tiny_timm_towers
from torch import nn

TINY_TEXT_CONFIG: dict[str, Any] = {k: v for k, v in TEXT_CONFIG.items() if k != "model_type"}
# vision_backbone_id -> arch_specifier OpenVLA uses with it
ARCH_SPECIFIERS = {"dinosiglip-vit-so-224px": "no-align+fused-gelu-mlp", "siglip-vit-so400m": "no-align+gelu-mlp"}
UNNORM_KEY = "tiny_dataset"


def require_remote_code_stack() -> None:
    """Skip unless the reference clients' model code can run here (it refuses timm >= 1: OpenVLA's pins only)."""
    import timm

    if int(timm.__version__.split(".")[0]) >= 1:
        pytest.skip(
            f"OpenVLA's remote code refuses timm {timm.__version__} (it takes 0.9.10-0.9.16) and breaks on "
            "timm 1.x's get_intermediate_layers; it runs on OpenVLA's pins (STACK=openvla)"
        )


def norm_stats(action_dim: int = 7) -> dict[str, Any]:
    """Action statistics for one dataset with every field OpenVLA and OFT read (q01/q99, min/max, mask)."""
    low, high = [-0.5] * action_dim, [0.5] * action_dim
    mask = [True] * (action_dim - 1) + [False]
    return {UNNORM_KEY: {"action": {"q01": low, "q99": high, "min": low, "max": high, "mask": mask}}}


def build_reference_vla(
    modeling: types.ModuleType,
    configuration: types.ModuleType,
    vision_backbone_id: str = "dinosiglip-vit-so-224px",
    action_dim: int = 7,
    seed: int = 0,
) -> nn.Module:
    """``modeling.OpenVLAForActionPrediction`` with tiny towers and a tiny Llama, fp32, eval mode."""
    require_remote_code_stack()
    config = configuration.OpenVLAConfig(
        vision_backbone_id=vision_backbone_id,
        llm_backbone_id="llama2-7b-pure",
        arch_specifier=ARCH_SPECIFIERS[vision_backbone_id],
        text_config=dict(TINY_TEXT_CONFIG),
        norm_stats=norm_stats(action_dim),
    )
    with tiny_timm_towers():
        torch.manual_seed(seed)
        return modeling.OpenVLAForActionPrediction(config).eval()
