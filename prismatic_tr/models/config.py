"""Configuration of the native OpenVLA model: OpenVLA's ``config.json`` fields, presets, and our extensions.

``NativeOpenVLAConfig`` reads and writes the same ``config.json`` as OpenVLA's ``OpenVLAConfig``
(``model_type`` "openvla": ``vision_backbone_id``, ``llm_backbone_id``, ``arch_specifier``,
``use_fused_vision_backbone``, ``image_resize_strategy``, ``text_config``, ``llm_max_length``,
``pad_token_id``, ``pad_to_multiple_of``, ``norm_stats``, ``n_action_bins``, and the derived
``timm_model_ids`` / ``timm_override_act_layers`` / ``image_sizes``), so a checkpoint saved by either loads in
the other. Extensions (ignored by OpenVLA's code): ``timm_model_kwargs`` (per-tower overrides of timm's
architecture arguments, used by the small presets), ``empty_token_id``, ``token_reduction`` (written by
``prismatic_tr.vla``), ``attn_implementation_llm`` and ``prismatic_tr_preset``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from transformers import LlamaConfig, PretrainedConfig

from .backbones import (
    LLAMA2_EMPTY_TOKEN_ID,
    LLAMA2_VOCAB_SIZE,
    RESIZE_STRATEGIES,
    check_choice,
    native_llm_problem,
    vision_backbone_spec,
)

MODEL_TYPE = "openvla"
ARCHITECTURE = "OpenVLAForActionPrediction"
IGNORE_INDEX = -100
DEFAULT_PAD_TO_MULTIPLE_OF = 64
DEFAULT_N_ACTION_BINS = 256

# The vision backbones the presets are built with (loading accepts every id of backbones.VISION_BACKBONES).
VISION_BACKBONE_IDS: tuple[str, ...] = ("dinosiglip-vit-so-224px", "siglip-vit-so400m")

# Tiny stand-ins built by timm itself from the real OpenVLA tower ids with smaller widths and depths
# (``timm.create_model(id, **kwargs)``): same classes, prefix tokens (DINOv2: CLS + 4 registers, LayerScale;
# SigLIP: no CLS, attention-pool head) and 224 px / patch 14 -> 16 x 16 = 256 patches, a fraction of the size.
TINY_TIMM_KWARGS: dict[str, dict[str, Any]] = {
    "vit_large_patch14_reg4_dinov2": dict(embed_dim=32, depth=3, num_heads=2),
    "vit_so400m_patch14_siglip_224": dict(embed_dim=48, depth=3, num_heads=2),
}


# The towers of the "policy" preset (the bundled trained policy): the same classes, 64 wide and 6 deep.
POLICY_TIMM_KWARGS: dict[str, dict[str, Any]] = {
    "vit_large_patch14_reg4_dinov2": dict(embed_dim=64, depth=6, num_heads=4),
    "vit_so400m_patch14_siglip_224": dict(embed_dim=64, depth=6, num_heads=4),
}


def tower_kwargs(table: dict[str, dict[str, Any]], timm_id: str) -> dict[str, Any] | None:
    """The overrides ``table`` gives a tower id (a pretrained tag such as ``.lvd142m`` is ignored), or None."""
    kwargs = table.get(timm_id.split(".", 1)[0])
    return dict(kwargs) if kwargs is not None else None


def tiny_timm_kwargs(timm_id: str) -> dict[str, Any] | None:
    """The tiny-size overrides for a tower id, or None."""
    return tower_kwargs(TINY_TIMM_KWARGS, timm_id)


@dataclass(frozen=True)
class Preset:
    """Sizes of one preset: the towers (``towers`` overrides per timm id, None for the real sizes) and a
    Llama decoder."""

    towers: dict[str, dict[str, Any]] | None
    vocab_size: int  # unpadded text vocabulary (Llama-2: 32000); the last 256 ids are the action bins
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def small(self) -> bool:
        """Built with timm's / transformers' own initialisation (cheap); the real sizes are not."""
        return self.towers is not None


PRESETS: dict[str, Preset] = {
    "tiny": Preset(TINY_TIMM_KWARGS, 1024, 64, 128, 2, 4),
    "policy": Preset(POLICY_TIMM_KWARGS, 1024, 128, 384, 4, 4),
    "cpu-bench": Preset(None, LLAMA2_VOCAB_SIZE, 2048, 5632, 8, 16),
    "openvla-7b": Preset(None, LLAMA2_VOCAB_SIZE, 4096, 11008, 32, 32),
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


def padded_vocab_size(vocab_size: int, pad_to_multiple_of: int) -> int:
    """Embedding rows: the vocabulary plus one <PAD> token, rounded up (OpenVLA: 32000 + 1 -> 32064)."""
    return -(-(vocab_size + 1) // pad_to_multiple_of) * pad_to_multiple_of


def llama_config_for(preset: Preset, pad_to_multiple_of: int = DEFAULT_PAD_TO_MULTIPLE_OF) -> dict[str, Any]:
    """Llama-2-style decoder settings of ``preset`` as a plain dict (pad id = unpadded vocab size)."""
    return dict(
        model_type="llama",
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


def _text_config(text_config: dict[str, Any] | LlamaConfig | None) -> LlamaConfig:
    if text_config is None:
        return LlamaConfig()
    if isinstance(text_config, LlamaConfig):
        return text_config
    if not isinstance(text_config, dict):
        raise ValueError(f"text_config must be a dict or LlamaConfig, got {type(text_config).__name__}")
    model_type = text_config.get("model_type", "llama")
    if model_type != "llama":
        raise ValueError(f"text_config.model_type={model_type!r}; the native model builds only 'llama'")
    return LlamaConfig(**{k: v for k, v in text_config.items() if k != "model_type"})


# follows OpenVLA c8f03f48 prismatic/extern/hf/configuration_prismatic.py OpenVLAConfig (MIT, see NOTICE): the same
# config.json fields, so either code reads the other's checkpoints.
class NativeOpenVLAConfig(PretrainedConfig):
    """OpenVLA's config (see the module docstring). Validates the ids the native model must build."""

    model_type = MODEL_TYPE

    def __init__(
        self,
        vision_backbone_id: str = "dinosiglip-vit-so-224px",
        llm_backbone_id: str = "llama2-7b-pure",
        arch_specifier: str | None = None,
        use_fused_vision_backbone: bool | None = None,
        image_resize_strategy: str = "resize-naive",
        text_config: dict[str, Any] | LlamaConfig | None = None,
        llm_max_length: int = 2048,
        pad_to_multiple_of: int = DEFAULT_PAD_TO_MULTIPLE_OF,
        norm_stats: dict[str, Any] | None = None,
        n_action_bins: int = DEFAULT_N_ACTION_BINS,
        timm_model_kwargs: list[dict[str, Any] | None] | None = None,
        empty_token_id: int | None | str = "auto",
        token_reduction: dict[str, Any] | None = None,
        attn_implementation_llm: str = "sdpa",
        prismatic_tr_preset: str | None = None,
        **kwargs: Any,
    ) -> None:
        spec = vision_backbone_spec(vision_backbone_id)
        problem = native_llm_problem(llm_backbone_id)
        if problem is not None:
            raise ValueError(problem)
        check_choice("image_resize_strategy", image_resize_strategy, RESIZE_STRATEGIES)
        self.vision_backbone_id, self.llm_backbone_id = vision_backbone_id, llm_backbone_id
        self.use_fused_vision_backbone = spec.fused if use_fused_vision_backbone is None else bool(use_fused_vision_backbone)
        if self.use_fused_vision_backbone != spec.fused:
            raise ValueError(f"use_fused_vision_backbone={use_fused_vision_backbone} contradicts "
                             f"vision_backbone_id={vision_backbone_id!r} ({len(spec.timm_model_ids)} tower(s))")
        default_arch = "no-align+fused-gelu-mlp" if spec.fused else "no-align+gelu-mlp"
        self.arch_specifier = arch_specifier or default_arch
        self.timm_model_ids = list(spec.timm_model_ids)
        self.timm_override_act_layers = list(spec.act_layers)
        self.image_sizes = list(spec.image_sizes)
        self.image_resize_strategy = image_resize_strategy
        self.text_config = _text_config(text_config)
        self.llm_max_length = llm_max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.norm_stats = copy.deepcopy(norm_stats) if norm_stats is not None else None
        self.n_action_bins = n_action_bins
        self.timm_model_kwargs = _check_tower_kwargs(timm_model_kwargs, len(spec.timm_model_ids))
        self.empty_token_id = _default_empty_token(empty_token_id, self.text_vocab_size)
        self.token_reduction = copy.deepcopy(token_reduction)
        self.attn_implementation_llm = attn_implementation_llm
        self.prismatic_tr_preset = prismatic_tr_preset
        for derived in ("timm_model_ids", "timm_override_act_layers", "image_sizes", "hf_llm_id", "pad_token_id"):
            kwargs.pop(derived, None)
        kwargs.setdefault("architectures", [ARCHITECTURE])
        super().__init__(pad_token_id=self.text_config.pad_token_id, **kwargs)

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


def _check_tower_kwargs(value: Any, towers: int) -> list[dict[str, Any] | None] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != towers or any(
        v is not None and not isinstance(v, dict) for v in value
    ):
        raise ValueError(f"timm_model_kwargs={value!r}; give one dict (or null) per tower ({towers})")
    return [dict(v) if v is not None else None for v in value]


def _default_empty_token(value: int | None | str, text_vocab_size: int) -> int | None:
    """OpenVLA appends Llama-2's empty token 29871 after the prompt; models with a smaller vocabulary have none."""
    if value == "auto":
        return LLAMA2_EMPTY_TOKEN_ID if text_vocab_size > LLAMA2_EMPTY_TOKEN_ID else None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < text_vocab_size):
        raise ValueError(f"empty_token_id={value!r}; use null or a token id below {text_vocab_size}")
    return value


def make_config(
    preset: str = "tiny", vision_backbone_id: str = "dinosiglip-vit-so-224px"
) -> NativeOpenVLAConfig:
    """Config for ``preset`` x ``vision_backbone_id`` with the synthetic "bridge_orig" statistics."""
    check_choice("preset", preset, PRESETS)
    check_choice("vision_backbone_id", vision_backbone_id, VISION_BACKBONE_IDS)
    p = PRESETS[preset]
    spec = vision_backbone_spec(vision_backbone_id)
    kwargs = [tower_kwargs(p.towers, t) for t in spec.timm_model_ids] if p.towers is not None else None
    return NativeOpenVLAConfig(
        vision_backbone_id=vision_backbone_id,
        text_config=llama_config_for(p),
        norm_stats=copy.deepcopy(SYNTHETIC_NORM_STATS),
        timm_model_kwargs=kwargs,
        prismatic_tr_preset=preset,
    )
