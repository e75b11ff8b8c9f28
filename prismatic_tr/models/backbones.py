"""The backbone ids an OpenVLA ``config.json`` names, and what each one is built from.

These are facts about OpenVLA's checkpoints (its ``configuration_prismatic.py``, MIT): a vision backbone id
names one or two timm towers, their input sizes and activation overrides; an LLM backbone id names a
Hugging Face decoder family. The native model builds every vision backbone below and the Llama-family
LLMs (Llama-2, Vicuna); the others load only through OpenVLA's remote code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LLAMA2_EMPTY_TOKEN_ID = 29871  # "▁": OpenVLA appends it after "Out:" at inference (and trains with it)
LLAMA2_VOCAB_SIZE = 32000
RESIZE_STRATEGIES = ("resize-naive", "resize-crop", "letterbox")  # image_resize_strategy values


@dataclass(frozen=True)
class VisionBackboneSpec:
    """One OpenVLA vision backbone: a timm id, input size and activation override per tower."""

    timm_model_ids: tuple[str, ...]
    image_sizes: tuple[int, ...]
    act_layers: tuple[str | None, ...]

    @property
    def fused(self) -> bool:
        return len(self.timm_model_ids) == 2


_DINO, _CLIP = "vit_large_patch14_reg4_dinov2.lvd142m", "vit_large_patch14_clip_224.openai"
# follows OpenVLA c8f03f48 prismatic/extern/hf/configuration_prismatic.py (MIT, see NOTICE): the backbone ids and the
# timm towers, image sizes and overrides they stand for.
VISION_BACKBONES: dict[str, VisionBackboneSpec] = {
    "clip-vit-l": VisionBackboneSpec((_CLIP,), (224,), ("quick_gelu",)),
    "clip-vit-l-336px": VisionBackboneSpec(("vit_large_patch14_clip_336.openai",), (336,), ("quick_gelu",)),
    "dinov2-vit-l": VisionBackboneSpec((_DINO,), (224,), (None,)),
    "in1k-vit-l": VisionBackboneSpec(("vit_large_patch16_224.augreg_in21k_ft_in1k",), (224,), (None,)),
    "siglip-vit-so400m": VisionBackboneSpec(("vit_so400m_patch14_siglip_224",), (224,), (None,)),
    "siglip-vit-so400m-384px": VisionBackboneSpec(("vit_so400m_patch14_siglip_384",), (384,), (None,)),
    "dinoclip-vit-l-336px": VisionBackboneSpec(
        (_DINO, "vit_large_patch14_clip_336.openai"), (336, 336), (None, "quick_gelu")
    ),
    "dinosiglip-vit-so-224px": VisionBackboneSpec((_DINO, "vit_so400m_patch14_siglip_224"), (224, 224), (None, None)),
    "dinosiglip-vit-so-384px": VisionBackboneSpec((_DINO, "vit_so400m_patch14_siglip_384"), (384, 384), (None, None)),
}

# LLM backbone id -> decoder family. Only "llama" is built natively (transformers' LlamaForCausalLM).
LLM_BACKBONES: dict[str, str] = {
    "llama2-7b-pure": "llama",
    "llama2-13b-pure": "llama",
    "llama2-7b-chat": "llama",
    "llama2-13b-chat": "llama",
    "vicuna-v15-7b": "llama",
    "vicuna-v15-13b": "llama",
    "mistral-v0.1-7b-pure": "mistral",
    "mistral-v0.1-7b-instruct": "mistral",
    "phi-2-3b": "phi",
}
NATIVE_LLM_FAMILIES = ("llama",)


def check_choice(name: str, value: Any, allowed: dict[str, Any] | tuple[str, ...]) -> None:
    """Raise ValueError naming ``value`` and the allowed choices when ``value`` is not one of them."""
    if value not in allowed:
        raise ValueError(f"Unknown {name} {value!r}; allowed: {sorted(allowed)}")


def vision_backbone_spec(vision_backbone_id: str) -> VisionBackboneSpec:
    """The spec of ``vision_backbone_id``; ValueError listing the known ids otherwise."""
    check_choice("vision_backbone_id", vision_backbone_id, VISION_BACKBONES)
    return VISION_BACKBONES[vision_backbone_id]


def native_llm_problem(llm_backbone_id: str) -> str | None:
    """Why the native model cannot build ``llm_backbone_id`` (None when it can)."""
    family = LLM_BACKBONES.get(llm_backbone_id)
    if family is None:
        return f"unknown llm_backbone_id {llm_backbone_id!r} (known: {sorted(LLM_BACKBONES)})"
    if family not in NATIVE_LLM_FAMILIES:
        return f"llm_backbone_id {llm_backbone_id!r} is a {family} model; the native model builds only Llama-family LLMs"
    return None
