"""One RLDS step -> one OpenVLA training example (pixel values, input ids, labels).

Sequence layout (L = len(prompt ids) + A + 1)::

    input_ids: [BOS, prompt ..., "Out:", a_1 ... a_A, EOS]
    labels:    [-100 ...                 , a_1 ... a_A, EOS]

Prompt: ``In: What action should the robot take to {instruction}?\\nOut:``; actions are normalised with the
dataset's q01/q99 bounds (mask respected) and mapped to the last ``n_bins`` token ids (OpenVLA's scheme).
The model inserts its visual tokens after BOS itself, so nothing here depends on their number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from prismatic_tr.models import IGNORE_INDEX, ActionTokenizer, normalize_actions
from prismatic_tr.models.tokenizer import PROMPT_TEMPLATE, build_prompt

__all__ = ["PROMPT_TEMPLATE", "ActionPromptTransform", "ImageAugmentation", "build_prompt"]


@dataclass(frozen=True)
class ImageAugmentation:
    """OpenVLA-style training augmentation on PIL images, torch-side (off unless enabled).

    Random resized crop keeping ``crop_scale`` of the area at aspect 1 (resized back to the input size),
    then brightness / contrast / saturation / hue jitter. Uses torch's global RNG (seed it per rank).
    """

    crop_scale: float = 0.9
    brightness: float = 0.2
    contrast: tuple[float, float] = (0.8, 1.2)
    saturation: tuple[float, float] = (0.8, 1.2)
    hue: float = 0.05

    def __post_init__(self) -> None:
        if not 0.0 < self.crop_scale <= 1.0:
            raise ValueError(f"crop_scale={self.crop_scale} must be in (0, 1]")

    def __call__(self, image: Image.Image) -> Image.Image:
        from torchvision import transforms as T

        size = (image.height, image.width)
        crop = T.RandomResizedCrop(size, scale=(self.crop_scale, self.crop_scale), ratio=(1.0, 1.0), antialias=True)
        jitter = T.ColorJitter(self.brightness, self.contrast, self.saturation, self.hue)
        return jitter(crop(image))


# follows OpenVLA c8f03f48 prismatic/vla/datasets/datasets.py RLDSBatchTransform (MIT, see NOTICE): sequence layout
# and labels, so fine-tuning trains what the released checkpoints expect.
class ActionPromptTransform:
    """Callable: step dict {"image" uint8 (H, W, 3), "instruction" bytes|str, "action" (A,)} -> example.

    Example: {"pixel_values": (C, H, W) float, "input_ids": (L,) long, "labels": (L,) long}. The prompt ids
    and pixel values come from ``processor(prompt, image)``, exactly as at inference; ``prompt_suffix_ids``
    are appended after the prompt (the real OpenVLA's ``predict_action`` appends Llama's empty token 29871).

    Args:
        processor: OpenVLA-style processor; ``processor(text, image, return_tensors="pt")`` gives input_ids
            (1, L) with BOS and pixel_values (1, C, H, W).
        vocab_size: the model's unpadded vocabulary (action bins are its last ``n_bins`` ids).
        action_stats: {"q01", "q99", "mask"?} (or a dict with an "action" entry) for normalisation.
    """

    def __init__(
        self,
        processor: Any,
        vocab_size: int,
        eos_token_id: int,
        action_stats: Mapping[str, Any],
        n_bins: int = 256,
        image_aug: ImageAugmentation | None = None,
        prompt_suffix_ids: Sequence[int] = (),
        predict_stop_token: bool = True,
    ) -> None:
        self.processor, self.image_aug = processor, image_aug
        self.eos_token_id, self.prompt_suffix_ids = int(eos_token_id), [int(i) for i in prompt_suffix_ids]
        self.action_stats = dict(action_stats.get("action", action_stats))
        self.action_tokenizer = ActionTokenizer(int(vocab_size), n_bins=n_bins)
        self.predict_stop_token = predict_stop_token

    def action_token_ids(self, action: np.ndarray) -> list[int]:
        """(A,) raw action -> A token ids (normalised with q01/q99, clipped, binned)."""
        normed = normalize_actions(np.asarray(action, dtype=np.float64), self.action_stats)
        return [int(i) for i in self.action_tokenizer.encode(normed)]

    def __call__(self, step: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        text = step["instruction"]
        text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
        image = Image.fromarray(np.asarray(step["image"], dtype=np.uint8))
        if self.image_aug is not None:
            image = self.image_aug(image)
        enc = self.processor(build_prompt(text), image, return_tensors="pt")
        prompt_ids = [int(i) for i in enc["input_ids"][0]] + self.prompt_suffix_ids
        action_ids = self.action_token_ids(step["action"])
        input_ids = torch.tensor(prompt_ids + action_ids + [self.eos_token_id], dtype=torch.long)
        labels = input_ids.clone()
        labels[: len(prompt_ids)] = IGNORE_INDEX
        if not self.predict_stop_token:
            labels[-1] = IGNORE_INDEX
        return {"pixel_values": torch.as_tensor(enc["pixel_values"])[0], "input_ids": input_ids, "labels": labels}
