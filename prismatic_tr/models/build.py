"""``build_vla`` / ``build_oft_vla``: a randomly initialised native OpenVLA (or OpenVLA-OFT) model from a preset and a
vision backbone id."""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from torch import nn

from .backbones import check_choice
from .config import PRESETS, NativeOpenVLAConfig, make_config
from .init_utils import building_on_meta, materialize_parameters_, parameters_on_meta
from .modeling import NativeOpenVLA
from .oft import NativeOpenVLAOFT, oft_config_from
from .oft_config import OFT_PRESETS, OFTSettings, synthetic_proprio_stats

M = TypeVar("M", bound=NativeOpenVLA)


def build_vla(
    preset: str = "tiny",
    vision_backbone_id: str = "dinosiglip-vit-so-224px",
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    seed: int = 0,
) -> NativeOpenVLA:
    """Build a ``NativeOpenVLA`` in eval mode with random weights drawn from ``seed``.

    Presets: "tiny" (OpenVLA's tower classes at tiny width and depth with the real 256-token geometry, Llama
    h64 x 2 layers, vocab 1024), "policy" (towers 64 wide x 6 deep, Llama h128 x 4 layers, vocab 1024: the
    size of the bundled trained policy), "cpu-bench" (real DINOv2-L / SigLIP-so400m, Llama h2048 x 8 layers, vocab
    32000 -> 32064), "openvla-7b" (real towers + Llama-2-7B sizes; build it under ``torch.device("meta")`` off
    a GPU); the OpenVLA-OFT presets (:data:`~.oft_config.OFT_PRESETS`: "tiny-oft", "cpu-bench-oft",
    "openvla-oft-7b") build a :class:`NativeOpenVLAOFT` on the towers and Llama of "tiny" / "cpu-bench" /
    "openvla-7b" (:func:`build_oft_vla`). The global
    RNG state is left untouched. The small presets use timm's / transformers' own init; the big presets are
    materialised directly on ``device`` in ``dtype`` with N(0, 0.02) weights (see ``init_utils``).
    """
    if preset in OFT_PRESETS:
        base, settings = OFT_PRESETS[preset]
        model = build_oft_vla(base, vision_backbone_id, settings, dtype, device, seed)
        model.config.prismatic_tr_preset = preset
        return model
    check_choice("preset", preset, (*PRESETS, *OFT_PRESETS))
    return _build(NativeOpenVLA, make_config(preset, vision_backbone_id), PRESETS[preset].small, dtype, device, seed)


def build_oft_vla(
    preset: str = "tiny",
    vision_backbone_id: str = "dinosiglip-vit-so-224px",
    oft: dict[str, Any] | OFTSettings | None = None,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    seed: int = 0,
) -> NativeOpenVLAOFT:
    """:func:`build_vla`'s towers, projector and Llama as OpenVLA-OFT (:class:`NativeOpenVLAOFT`), with its proprio
    projector and L1 head (or the discrete variant) as ``oft`` sets them (:class:`OFTSettings` or a dict; default
    OFT's LIBERO settings: 1 image, proprio 8, chunk 8 x 7, L1 head, causal attention)."""
    config = oft_config_from(make_config(preset, vision_backbone_id), oft)
    dim = config.oft_settings.proprio_dim
    if dim is not None:  # the synthetic statistics get a proprio block, as OFT's dataset_statistics.json have
        config.norm_stats = {k: {**v, "proprio": synthetic_proprio_stats(dim)} for k, v in config.norm_stats.items()}
    return _build(NativeOpenVLAOFT, config, PRESETS[preset].small, dtype, device, seed)


def _build(cls: type[M], config: NativeOpenVLAConfig, small: bool, dtype: torch.dtype | None,
           device: str | torch.device | None, seed: int) -> M:
    on_meta = building_on_meta()
    if small and not on_meta:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = cls(config)  # timm / transformers' own init
        return cast_parameters_(model.to(device=device), dtype).eval()
    with parameters_on_meta():
        model = cls(config)
    if on_meta:
        return model.to("meta").eval()
    materialize_parameters_(model, device or "cpu", dtype or torch.float32, seed)
    return model.to(device=device).eval()


def cast_parameters_(model: nn.Module, dtype: torch.dtype | None) -> nn.Module:
    """Cast floating parameters to ``dtype`` in place, leaving buffers alone: the rotary frequencies stay
    float32, as in a model loaded with ``torch_dtype`` (``module.to(dtype)`` would round them to ``dtype``)."""
    if dtype is not None:
        for param in model.parameters():
            if param.is_floating_point():
                param.data = param.data.to(dtype)
    return model
