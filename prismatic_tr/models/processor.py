"""``PrismaticProcessor``: a tokenizer and OpenVLA's image preprocessing, with OpenVLA's file layout.

``save_pretrained`` writes the tokenizer files and ``preprocessor_config.json`` as OpenVLA's processor does;
``from_pretrained`` reads such a directory (a real OpenVLA checkpoint's included) without remote code: the
tokenizer through ``AutoTokenizer``, the image settings through :class:`ImageTransform`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from transformers import BatchFeature, PreTrainedTokenizerBase

from .image_processing import ImageTransform, preprocessor_config
from .tokenizer import build_tokenizer

PROCESSOR_CONFIG = "preprocessor_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"


# follows OpenVLA c8f03f48 prismatic/extern/hf/processing_prismatic.py PrismaticProcessor (MIT, see NOTICE): call
# signature and preprocessor_config.json layout, so processor directories load in both directions.
class PrismaticProcessor:
    """Tokenizer + image transform with the call signature of OpenVLA's processor."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, image_transform: ImageTransform) -> None:
        self.tokenizer = tokenizer
        self.image_transform = image_transform

    def __call__(
        self, text: str | list[str], images: Any, return_tensors: str = "pt", padding: bool | str = True
    ) -> BatchFeature:
        """Text (str or list) and images (PIL, uint8 HxWx3 array, or a list) -> input_ids, attention_mask,
        pixel_values (B, 3 * towers, S, S) float32. Batches are padded on the tokenizer's side."""
        if return_tensors != "pt":
            raise ValueError(f"return_tensors={return_tensors!r}; only 'pt' is supported")
        texts = [text] if isinstance(text, str) else list(text)
        imgs = images if isinstance(images, (list, tuple)) else [images]
        if len(texts) != len(imgs):
            raise ValueError(f"{len(texts)} texts but {len(imgs)} images; pass one image per text")
        enc = self.tokenizer(texts, return_tensors="pt", padding=padding)
        pixel_values = torch.stack([self.image_transform(im) for im in imgs])
        return BatchFeature({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                             "pixel_values": pixel_values})

    def batch_decode(self, *args: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(*args, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write the tokenizer files and OpenVLA's ``preprocessor_config.json``."""
        os.makedirs(save_directory, exist_ok=True)
        self.tokenizer.save_pretrained(save_directory)
        _portable_tokenizer_files(save_directory)
        with open(os.path.join(save_directory, PROCESSOR_CONFIG), "w") as f:
            json.dump(self.image_transform.config, f, indent=2)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> PrismaticProcessor:
        """Load a processor directory (OpenVLA's layout); ValueError naming a missing or foreign file."""
        path = os.path.join(directory, PROCESSOR_CONFIG)
        if not os.path.isfile(path):
            raise ValueError(f"no {PROCESSOR_CONFIG} in {str(directory)!r}; it is not an OpenVLA processor directory")
        with open(path) as f:
            cfg = json.load(f)
        if "input_sizes" not in cfg:
            raise ValueError(f"{path} has no 'input_sizes': not OpenVLA's preprocessor config (keys {sorted(cfg)})")
        return cls(load_tokenizer(directory), ImageTransform(cfg))


def _portable_tokenizer_files(directory: str | os.PathLike) -> None:
    """Make a saved fast tokenizer loadable on transformers 4.40 / tokenizers 0.19 as well as the newest:
    name its class ``PreTrainedTokenizerFast`` (transformers 5 writes ``TokenizersBackend``) and store BPE merges
    as "a b" strings (tokenizers >= 0.20 writes pairs, which 0.19 cannot read; both read strings)."""
    tok_path, cfg_path = os.path.join(directory, "tokenizer.json"), os.path.join(directory, TOKENIZER_CONFIG)
    if not os.path.isfile(tok_path):
        return
    with open(tok_path) as f:
        tok = json.load(f)
    merges = tok.get("model", {}).get("merges")
    if merges and all(isinstance(m, list) and len(m) == 2 and " " not in m[0] + m[1] for m in merges):
        tok["model"]["merges"] = [f"{a} {b}" for a, b in merges]
        with open(tok_path, "w") as f:
            json.dump(tok, f, ensure_ascii=False)
    if os.path.isfile(cfg_path):
        with open(cfg_path) as f:
            cfg = json.load(f)
        if cfg.get("tokenizer_class") in (None, "TokenizersBackend"):
            cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
            with open(cfg_path, "w") as f:
                json.dump(cfg, f, indent=2)


def load_tokenizer(directory: str | os.PathLike) -> PreTrainedTokenizerBase:
    """The tokenizer saved in ``directory``: a plain fast tokenizer from tokenizer.json when the config names
    no model-specific class, else ``AutoTokenizer`` (e.g. OpenVLA's ``LlamaTokenizer``). transformers' warning
    about the unknown ``openvla`` model type, met while it looks at config.json, is silenced."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    path = os.path.join(directory, TOKENIZER_CONFIG)
    cls_name = None
    if os.path.isfile(path):
        with open(path) as f:
            cls_name = json.load(f).get("tokenizer_class")
    if cls_name in ("PreTrainedTokenizerFast", "TokenizersBackend") and os.path.isfile(
            os.path.join(directory, "tokenizer.json")):
        return PreTrainedTokenizerFast.from_pretrained(str(directory))
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(str(directory))
    finally:
        hf_logging.set_verbosity(level)


def build_processor(config: Any, task_words: bool = False) -> PrismaticProcessor:
    """Processor for a model config (a preset's locally built tokenizer, with the tabletop task's words whole
    when ``task_words``; OpenVLA's image settings)."""
    cfg = preprocessor_config(list(config.timm_model_ids), list(config.image_sizes), config.image_resize_strategy,
                              bool(config.use_fused_vision_backbone))
    tokenizer = build_tokenizer(int(config.text_vocab_size), int(config.n_action_bins), task_words)
    return PrismaticProcessor(tokenizer, ImageTransform(cfg))
