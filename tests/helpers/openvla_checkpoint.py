"""Small OpenVLA checkpoints with deterministic weights, written by OpenVLA's own code or natively.

Both writers give a directory in OpenVLA's layout (``config.json``, safetensors, tokenizer files,
``preprocessor_config.json``) holding the SAME weights: every tensor is filled from its name with a seeded
numpy generator (:func:`fill_deterministic_`), LayerScale's ``scale_factor`` named like timm's ``gamma``.
So a checkpoint made on the pins with OpenVLA's remote code and one made natively on any stack describe the
same model, and golden outputs recorded from OpenVLA's code on the pins can be checked on the newest stack.
"""

from __future__ import annotations

import copy
import json
import shutil
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.models import SYNTHETIC_NORM_STATS, build_tokenizer
from prismatic_tr.models.config import tiny_timm_kwargs
from prismatic_tr.models.image_processing import preprocessor_config

# A Llama-2-shaped vocabulary (so OpenVLA's empty token 29871 exists) with a tiny decoder.
TEXT_CONFIG: dict[str, Any] = dict(
    model_type="llama", vocab_size=32064, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5,
    tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=32000,
)
SEED = 1234


def _values(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    canonical = name.replace(".scale_factor", ".gamma")
    rng = np.random.default_rng([seed, zlib.crc32(canonical.encode())])
    noise = rng.standard_normal(shape)
    leaf = canonical.rsplit(".", 1)[-1]
    if leaf == "gamma":
        return 0.1 * (1.0 + 0.1 * noise)  # LayerScale
    if leaf == "weight" and len(shape) == 1:
        return 1.0 + 0.1 * noise  # norm weights
    if leaf == "bias":
        return 0.02 * noise
    return 0.05 * noise


@torch.no_grad()
def fill_deterministic_(model: nn.Module, seed: int = SEED) -> nn.Module:
    """Overwrite every parameter of ``model`` with values that depend only on its name, shape and ``seed``."""
    for name, param in model.named_parameters():
        param.copy_(torch.from_numpy(_values(name, tuple(param.shape), seed)).to(param.dtype))
    return model


def config_fields(vision_backbone_id: str, image_resize_strategy: str) -> dict[str, Any]:
    """The ``config.json`` fields both writers use (OpenVLA's, plus ``timm_model_kwargs`` for tiny towers)."""
    from prismatic_tr.models.backbones import vision_backbone_spec

    spec = vision_backbone_spec(vision_backbone_id)
    return dict(
        vision_backbone_id=vision_backbone_id, llm_backbone_id="llama2-7b-pure",
        arch_specifier="no-align+fused-gelu-mlp" if spec.fused else "no-align+gelu-mlp",
        image_resize_strategy=image_resize_strategy, text_config=copy.deepcopy(TEXT_CONFIG),
        norm_stats=copy.deepcopy(SYNTHETIC_NORM_STATS), n_action_bins=256,
        timm_model_kwargs=[tiny_timm_kwargs(t) for t in spec.timm_model_ids],
    )


def processor_fields(vision_backbone_id: str, image_resize_strategy: str) -> dict[str, Any]:
    from prismatic_tr.models.backbones import vision_backbone_spec

    spec = vision_backbone_spec(vision_backbone_id)
    return preprocessor_config(list(spec.timm_model_ids), list(spec.image_sizes), image_resize_strategy, spec.fused)


def write_upstream_checkpoint(out: Path, vision_backbone_id: str = "dinosiglip-vit-so-224px",
                              image_resize_strategy: str = "resize-naive", max_shard_size: str | None = None) -> Path:
    """Build OpenVLA's ``OpenVLAForActionPrediction`` with its own code (tiny towers), fill it, save it and
    its processor with ``save_pretrained``. Skips the test when the reference code is absent or cannot run."""
    from helpers.reference_clients import import_openvla_hf, tiny_timm_towers

    configuration = import_openvla_hf("configuration_prismatic")
    modeling = import_openvla_hf("modeling_prismatic")
    processing = import_openvla_hf("processing_prismatic")
    config = configuration.OpenVLAConfig(**config_fields(vision_backbone_id, image_resize_strategy))
    with tiny_timm_towers():
        model = modeling.OpenVLAForActionPrediction(config)
    fill_deterministic_(model.eval())
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(out), **kwargs)
    pcfg = processor_fields(vision_backbone_id, image_resize_strategy)
    image_processor = processing.PrismaticImageProcessor(
        use_fused_vision_backbone=pcfg["use_fused_vision_backbone"], image_resize_strategy=image_resize_strategy,
        input_sizes=[tuple(s) for s in pcfg["input_sizes"]], interpolations=pcfg["interpolations"],
        means=[tuple(m) for m in pcfg["means"]], stds=[tuple(s) for s in pcfg["stds"]],
    )
    tokenizer = build_tokenizer(TEXT_CONFIG["vocab_size"] - 64)
    processing.PrismaticProcessor(image_processor, tokenizer).save_pretrained(str(out))
    return out


def write_native_checkpoint(out: Path, vision_backbone_id: str = "dinosiglip-vit-so-224px",
                            image_resize_strategy: str = "resize-naive") -> Path:
    """The same checkpoint as :func:`write_upstream_checkpoint`, written by this package alone."""
    from prismatic_tr.models import ImageTransform, NativeOpenVLA, NativeOpenVLAConfig, PrismaticProcessor

    model = NativeOpenVLA(NativeOpenVLAConfig(**config_fields(vision_backbone_id, image_resize_strategy)))
    fill_deterministic_(model.eval())
    model.save_pretrained(out)
    tokenizer = build_tokenizer(TEXT_CONFIG["vocab_size"] - 64)
    PrismaticProcessor(tokenizer, ImageTransform(processor_fields(vision_backbone_id, image_resize_strategy))).save_pretrained(out)
    return out


# The auto_map entries of openvla/openvla-7b, file by file (its config.json, preprocessor_config.json and
# tokenizer_config.json on the Hugging Face hub).
OPENVLA_7B_AUTO_MAPS: dict[str, dict[str, str]] = {
    "config.json": {"AutoConfig": "configuration_prismatic.OpenVLAConfig",
                    "AutoModelForVision2Seq": "modeling_prismatic.OpenVLAForActionPrediction"},
    "preprocessor_config.json": {"AutoImageProcessor": "processing_prismatic.PrismaticImageProcessor",
                                 "AutoProcessor": "processing_prismatic.PrismaticProcessor"},
    "tokenizer_config.json": {"AutoProcessor": "processing_prismatic.PrismaticProcessor"},
}
REMOTE_CODE_FILES = ("configuration_prismatic.py", "modeling_prismatic.py", "processing_prismatic.py")


def add_remote_code(directory: Path) -> Path:
    """Give a checkpoint directory what ``openvla/openvla-7b`` ships besides weights and processor files: OpenVLA's
    remote code (copied from ``../shared/reference/openvla_hf``; skips the test when absent) and the ``auto_map`` of
    each JSON file that names it."""
    from helpers.reference_clients import require_reference

    code = require_reference("openvla_hf")
    for name in REMOTE_CODE_FILES:
        shutil.copyfile(code / name, directory / name)
    for name, auto_map in OPENVLA_7B_AUTO_MAPS.items():
        data = json.loads((directory / name).read_text())
        data["auto_map"] = auto_map
        (directory / name).write_text(json.dumps(data, indent=2))
    return directory


def sample_image(seed: int = 0, size: tuple[int, int] = (300, 200)) -> np.ndarray:
    """A non-square uint8 RGB image (H, W, 3) with structure (gradients plus noise), fixed by ``seed``."""
    h, w = size
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], axis=-1)
    return np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)
