"""Configuration of the reference OpenVLA-architecture model: presets, backbone ids, the config class.

The config mirrors the fields of OpenVLA's Hugging Face ``OpenVLAConfig`` that matter here
(``use_fused_vision_backbone``, ``timm_model_ids``, ``image_sizes``, ``text_config``, ``pad_to_multiple_of``,
``n_action_bins``, ``norm_stats``) and adds ``preset``, ``vision_specs`` (tiny ViTs) and ``token_reduction``
(a dict written by ``prismatic_tr.vla``; saved and loaded untouched).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from transformers import LlamaConfig, PretrainedConfig

MODEL_TYPE = "prismatic_tr_openvla"
IGNORE_INDEX = -100
DEFAULT_PAD_TO_MULTIPLE_OF = 64
DEFAULT_N_ACTION_BINS = 256

# vision_backbone_id -> (timm model ids, image sizes); the same ids OpenVLA uses.
VISION_BACKBONE_IDS: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "dinosiglip-vit-so-224px": (
        ("vit_large_patch14_reg4_dinov2", "vit_so400m_patch14_siglip_224"),
        (224, 224),
    ),
    "siglip-vit-so400m": (("vit_so400m_patch14_siglip_224",), (224,)),
}

# Tiny stand-ins with the real token geometry (224 px, patch 14 -> 16 x 16 = 256 patches).
# DINOv2-like: CLS + 4 registers, LayerScale, no pos-embed on prefix tokens. SigLIP-like: no CLS, 'map' head.
TINY_VIT_SPECS: dict[str, dict[str, Any]] = {
    "vit_large_patch14_reg4_dinov2": dict(
        img_size=224,
        patch_size=14,
        embed_dim=32,
        depth=3,
        num_heads=2,
        mlp_ratio=4.0,
        class_token=True,
        reg_tokens=4,
        no_embed_class=True,
        init_values=1e-5,
        num_classes=0,
    ),
    "vit_so400m_patch14_siglip_224": dict(
        img_size=224,
        patch_size=14,
        embed_dim=48,
        depth=3,
        num_heads=2,
        mlp_ratio=4.0,
        class_token=False,
        global_pool="map",
        num_classes=0,
    ),
}


# Tiny stand-ins built by timm itself from the real OpenVLA tower ids with smaller widths and depths
# (``timm.create_model(id, **kwargs)``): same classes, prefix tokens (DINOv2: CLS + 4 registers, LayerScale;
# SigLIP: no CLS, attention-pool head) and 224 px / patch 14 -> 16 x 16 = 256 patches, a fraction of the size.
TINY_TIMM_KWARGS: dict[str, dict[str, Any]] = {
    "vit_large_patch14_reg4_dinov2": dict(embed_dim=32, depth=3, num_heads=2),
    "vit_so400m_patch14_siglip_224": dict(embed_dim=48, depth=3, num_heads=2),
}


def tiny_timm_kwargs(timm_id: str) -> dict[str, Any] | None:
    """The tiny-size overrides for a tower id (a pretrained tag such as ``.lvd142m`` is ignored), or None."""
    kwargs = TINY_TIMM_KWARGS.get(timm_id.split(".", 1)[0])
    return dict(kwargs) if kwargs is not None else None


@dataclass(frozen=True)
class Preset:
    """Sizes of one preset: tiny ViTs or the real timm architectures, and a Llama decoder."""

    tiny_vision: bool
    vocab_size: int  # unpadded text vocabulary (Llama-2: 32000); the last 256 ids are the action bins
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    extra: dict[str, Any] = field(default_factory=dict)


PRESETS: dict[str, Preset] = {
    "tiny": Preset(True, 1024, 64, 128, 2, 4),
    "cpu-bench": Preset(False, 32000, 2048, 5632, 8, 16),
    "openvla-7b": Preset(False, 32000, 4096, 11008, 32, 32),
}

# Synthetic statistics (NOT the real BridgeData V2 statistics): plausible magnitudes for a 7-D end-effector
# delta action (xyz, rpy, gripper); the gripper dimension is not normalised (mask False), as in OpenVLA.
SYNTHETIC_NORM_STATS: dict[str, dict[str, dict[str, list[Any]]]] = {
    "bridge_orig": {
        "action": {
            "q01": [-0.030, -0.040, -0.030, -0.080, -0.090, -0.120, 0.0],
            "q99": [0.030, 0.040, 0.030, 0.080, 0.090, 0.120, 1.0],
            "mask": [True, True, True, True, True, True, False],
            "min": [-0.060, -0.080, -0.060, -0.160, -0.180, -0.240, 0.0],
            "max": [0.060, 0.080, 0.060, 0.160, 0.180, 0.240, 1.0],
            "mean": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.6],
            "std": [0.010, 0.013, 0.010, 0.027, 0.030, 0.040, 0.48],
        }
    }
}


def check_choice(name: str, value: str, allowed: dict[str, Any] | tuple[str, ...]) -> None:
    """Raise ValueError naming ``value`` and the allowed choices when ``value`` is not one of them."""
    if value not in allowed:
        raise ValueError(f"Unknown {name} {value!r}; allowed: {sorted(allowed)}")


def padded_vocab_size(vocab_size: int, pad_to_multiple_of: int) -> int:
    """Embedding rows: the vocabulary plus one <PAD> token, rounded up (OpenVLA: 32000 + 1 -> 32064)."""
    return -(-(vocab_size + 1) // pad_to_multiple_of) * pad_to_multiple_of


def llama_config_for(preset: Preset, pad_to_multiple_of: int = DEFAULT_PAD_TO_MULTIPLE_OF) -> dict[str, Any]:
    """Llama-2-style decoder settings of ``preset`` as a plain dict (pad id = unpadded vocab size)."""
    return dict(
        vocab_size=padded_vocab_size(preset.vocab_size, pad_to_multiple_of),
        hidden_size=preset.hidden_size,
        intermediate_size=preset.intermediate_size,
        num_hidden_layers=preset.num_hidden_layers,
        num_attention_heads=preset.num_attention_heads,
        num_key_value_heads=preset.num_attention_heads,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=preset.vocab_size,
        **preset.extra,
    )


class ReferenceOpenVLAConfig(PretrainedConfig):
    """Config of :class:`ReferenceOpenVLA`; ``text_config`` is a ``LlamaConfig`` (a dict is accepted)."""

    model_type = MODEL_TYPE

    def __init__(
        self,
        preset: str = "tiny",
        vision_backbone_id: str = "dinosiglip-vit-so-224px",
        text_config: dict[str, Any] | LlamaConfig | None = None,
        vision_specs: list[dict[str, Any]] | None = None,
        pad_to_multiple_of: int = DEFAULT_PAD_TO_MULTIPLE_OF,
        n_action_bins: int = DEFAULT_N_ACTION_BINS,
        norm_stats: dict[str, Any] | None = None,
        token_reduction: dict[str, Any] | None = None,
        attn_implementation_llm: str = "sdpa",
        **kwargs: Any,
    ) -> None:
        check_choice("preset", preset, PRESETS)
        check_choice("vision_backbone_id", vision_backbone_id, VISION_BACKBONE_IDS)
        timm_ids, sizes = VISION_BACKBONE_IDS[vision_backbone_id]
        self.preset = preset
        self.vision_backbone_id = vision_backbone_id
        self.use_fused_vision_backbone = len(timm_ids) == 2
        self.timm_model_ids = list(timm_ids)
        self.image_sizes = list(sizes)
        if vision_specs is None and PRESETS[preset].tiny_vision:
            vision_specs = [TINY_VIT_SPECS[t] for t in timm_ids]
        self.vision_specs = copy.deepcopy(vision_specs)  # None: the real timm architectures
        if text_config is None:
            text_config = llama_config_for(PRESETS[preset], pad_to_multiple_of)
        if isinstance(text_config, dict):
            text_config = LlamaConfig(**{k: v for k, v in text_config.items() if k != "model_type"})
        self.text_config = text_config
        self.pad_to_multiple_of = pad_to_multiple_of
        self.n_action_bins = n_action_bins
        self.norm_stats = copy.deepcopy(norm_stats) if norm_stats is not None else None
        self.token_reduction = copy.deepcopy(token_reduction)
        self.attn_implementation_llm = attn_implementation_llm
        kwargs.pop("pad_token_id", None)
        super().__init__(pad_token_id=text_config.pad_token_id, **kwargs)

    @property
    def text_vocab_size(self) -> int:
        """Unpadded vocabulary size (OpenVLA: ``text_config.vocab_size - pad_to_multiple_of`` = 32000)."""
        return int(self.text_config.vocab_size) - int(self.pad_to_multiple_of)

    def to_dict(self) -> dict[str, Any]:
        """Serialisable dict; ``text_config`` becomes a plain dict."""
        out = super().to_dict()
        if isinstance(out.get("text_config"), PretrainedConfig):
            out["text_config"] = out["text_config"].to_dict()
        return out
