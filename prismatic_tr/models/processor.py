"""``PrismaticProcessor``: a locally built Llama-like tokenizer plus OpenVLA's image transform. No downloads.

Tokenizer: byte-level BPE trained in-process (deterministically) on a small built-in corpus of robot
instructions, ids <unk>=0, <s>=1 (prepended as BOS), </s>=2, then the byte alphabet and merges, then filler
tokens ``<fill_i>`` up to ``vocab_size`` (so the last 256 ids, the action bins, never hold text), and <PAD>
as an added special token with id ``vocab_size`` (as OpenVLA adds <PAD> = 32000 to Llama-2's tokenizer).

Image transform: resize to 224 x 224 (bicubic), scale to [0, 1], normalise with ImageNet (DINOv2) mean/std
and with SigLIP's 0.5/0.5; channels concatenated [DINOv2, SigLIP] for the fused backbone.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import BatchFeature, PreTrainedTokenizerFast

PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"
PROCESSOR_CONFIG = "preprocessor_config.json"
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIGLIP_MEAN, SIGLIP_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
MAX_TRAINED_VOCAB = 1024

_VERBS = [
    "pick up",
    "put",
    "move",
    "push",
    "open",
    "close",
    "place",
    "stack",
    "wipe",
    "turn",
    "lift",
    "slide",
]
_OBJECTS = [
    "the red block",
    "the blue cup",
    "the green sponge",
    "the spoon",
    "the carrot",
    "the drawer",
    "the pot",
    "the towel",
    "the eggplant",
    "the yellow bowl",
    "the cloth",
    "the microwave door",
]
_PLACES = ["on the plate", "into the sink", "to the left", "in the basket", "on the table", "off the stove"]


def build_prompt(instruction: str) -> str:
    """OpenVLA's prompt: ``In: What action should the robot take to {instruction}?\\nOut:``."""
    return PROMPT_TEMPLATE.format(instruction=instruction.strip().rstrip("?").lower())


def _corpus() -> list[str]:
    """A fixed corpus of robot-instruction prompts (deterministic order)."""
    lines = [build_prompt(f"{v} {o} {p}") for v in _VERBS for o in _OBJECTS for p in _PLACES]
    return lines + ["the robot arm gripper moves slowly and carefully 0 1 2 3 4 5 6 7 8 9 , . ! ?"]


def _trained_bpe(max_vocab: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE on the corpus; returns its vocab and merges (format-independent)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    trainer = trainers.BpeTrainer(
        vocab_size=max_vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return dict(model["vocab"]), merges  # type: ignore[return-value]


def build_tokenizer(vocab_size: int, n_action_bins: int = 256) -> PreTrainedTokenizerFast:
    """Llama-like fast tokenizer with ``vocab_size`` base ids plus <PAD> (= ``vocab_size``)."""
    max_vocab = min(MAX_TRAINED_VOCAB, vocab_size - n_action_bins)
    if max_vocab < 512:
        raise ValueError(
            f"vocab_size={vocab_size} too small; need >= {512 + n_action_bins} for text + action bins"
        )
    vocab, merges = _trained_bpe(max_vocab)
    for i in range(len(vocab), vocab_size):
        vocab[f"<fill_{i}>"] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)]
    )
    tok.add_special_tokens(SPECIAL_TOKENS + ["<PAD>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<PAD>",
        padding_side="right",
        model_max_length=2048,
    )


def _to_pil(image: Any) -> Image.Image:
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[-1] == 3 and image.dtype == np.uint8:
        return Image.fromarray(image)
    raise ValueError(
        f"image of type {type(image).__name__} (shape {getattr(image, 'shape', None)}, "
        f"dtype {getattr(image, 'dtype', None)}) not supported; "
        "pass a PIL image or a uint8 numpy array (H, W, 3)"
    )


class PrismaticImageTransform:
    """PIL / uint8 HxWx3 image -> (3 * n, size, size) float32 tensor, one normalisation per featurizer."""

    def __init__(self, image_size: int = 224, fused: bool = True) -> None:
        self.image_size, self.fused = int(image_size), bool(fused)
        stats = (
            [(IMAGENET_MEAN, IMAGENET_STD), (SIGLIP_MEAN, SIGLIP_STD)]
            if fused
            else [(SIGLIP_MEAN, SIGLIP_STD)]
        )
        self.means = [torch.tensor(m).view(3, 1, 1) for m, _ in stats]
        self.stds = [torch.tensor(s).view(3, 1, 1) for _, s in stats]

    def __call__(self, image: Any) -> torch.Tensor:
        img = _to_pil(image).resize((self.image_size, self.image_size), Image.BICUBIC)
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return torch.cat([(x - m) / s for m, s in zip(self.means, self.stds, strict=True)], dim=0)


class PrismaticProcessor:
    """Tokenizer + image transform with the call signature of OpenVLA's processor."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, image_size: int = 224, fused: bool = True) -> None:
        self.tokenizer = tokenizer
        self.image_transform = PrismaticImageTransform(image_size, fused)

    def __call__(
        self, text: str | list[str], images: Any, return_tensors: str = "pt", padding: bool | str = True
    ) -> BatchFeature:
        """Text (str or list) and images (PIL, uint8 HxWx3 array, or a list) -> input_ids, attention_mask,
        pixel_values (B, 3 * n, 224, 224). Batches are padded on the tokenizer's side (right by default)."""
        if return_tensors != "pt":
            raise ValueError(f"return_tensors={return_tensors!r}; only 'pt' is supported")
        texts = [text] if isinstance(text, str) else list(text)
        imgs = images if isinstance(images, (list, tuple)) else [images]
        if len(texts) != len(imgs):
            raise ValueError(f"{len(texts)} texts but {len(imgs)} images; pass one image per text")
        enc = self.tokenizer(texts, return_tensors="pt", padding=padding)
        pixel_values = torch.stack([self.image_transform(im) for im in imgs])
        return BatchFeature(
            {
                "input_ids": enc["input_ids"],
                "attention_mask": enc["attention_mask"],
                "pixel_values": pixel_values,
            }
        )

    def batch_decode(self, *args: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(*args, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """Write the tokenizer files and preprocessor_config.json."""
        os.makedirs(save_directory, exist_ok=True)
        self.tokenizer.save_pretrained(save_directory)
        cfg = {
            "processor_class": "PrismaticTRProcessor",
            "image_size": self.image_transform.image_size,
            "use_fused_vision_backbone": self.image_transform.fused,
        }
        with open(os.path.join(save_directory, PROCESSOR_CONFIG), "w") as f:
            json.dump(cfg, f, indent=2)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> PrismaticProcessor:
        """Load what :meth:`save_pretrained` wrote."""
        path = os.path.join(directory, PROCESSOR_CONFIG)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"No {PROCESSOR_CONFIG} in {str(directory)!r}")
        with open(path) as f:
            cfg = json.load(f)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(directory))
        return cls(tokenizer, cfg["image_size"], cfg["use_fused_vision_backbone"])


def build_processor(config: Any) -> PrismaticProcessor:
    """Processor matching a ``ReferenceOpenVLAConfig`` (vocabulary size, image size, fused or not)."""
    tokenizer = build_tokenizer(int(config.text_vocab_size), int(config.n_action_bins))
    return PrismaticProcessor(tokenizer, int(config.image_sizes[0]), bool(config.use_fused_vision_backbone))
