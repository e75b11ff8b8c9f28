"""OpenVLA's image preprocessing, read from and written to ``preprocessor_config.json``.

Per tower: resize, centre crop, to a [0, 1] tensor, normalise with the tower's mean / std; the towers'
tensors are stacked along channels ([DINOv2, SigLIP] for the fused backbone). ``image_resize_strategy``:
``resize-naive`` resizes to (S, S); ``resize-crop`` resizes the shorter side to S, then crops the centre;
``letterbox`` first pads the image to a square with the mean colour, then resizes. The steps and the
parameter files follow OpenVLA's ``PrismaticImageProcessor`` (openvla/openvla ``processing_prismatic.py``,
MIT) on purpose, so that pixel values are identical: torchvision's functional ops on PIL images, and the
letterbox fill taken from the last tower's mean, as there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TVF

from .backbones import RESIZE_STRATEGIES, check_choice

_INTERPOLATIONS = {"bicubic": InterpolationMode.BICUBIC, "bilinear": InterpolationMode.BILINEAR,
                   "nearest": InterpolationMode.NEAREST, "lanczos": InterpolationMode.LANCZOS}
_PIL_CODES = {code: mode for mode, code in TVF.pil_modes_mapping.items() if mode in _INTERPOLATIONS.values()}


@dataclass(frozen=True)
class TowerTransform:
    """Resize / crop / normalise settings of one tower (``size`` int: shorter side; pair: exact size)."""

    size: int | tuple[int, int]
    crop: tuple[int, int]
    interpolation: InterpolationMode
    mean: tuple[float, ...]
    std: tuple[float, ...]


def _interpolation(value: Any) -> InterpolationMode:
    if isinstance(value, int) and value in _PIL_CODES:
        return _PIL_CODES[value]
    if isinstance(value, str) and value in _INTERPOLATIONS:
        return _INTERPOLATIONS[value]
    raise ValueError(f"interpolation {value!r} is not supported; use one of {sorted(_INTERPOLATIONS)}")


def tower_transforms(cfg: dict[str, Any]) -> list[TowerTransform]:
    """Per-tower settings from a ``preprocessor_config.json`` dict (OpenVLA's fields).

    Uses the saved ``tvf_*_params`` when present (what OpenVLA's processor actually applies), else derives
    them from ``input_sizes`` / ``interpolations`` / ``means`` / ``stds`` and the resize strategy.
    """
    strategy = cfg.get("image_resize_strategy", "resize-naive")
    check_choice("image_resize_strategy", strategy, RESIZE_STRATEGIES)
    sizes = [tuple(s) for s in cfg["input_sizes"]]
    n = len(sizes)
    interps = cfg.get("interpolations") or ["bicubic"] * n
    resize = cfg.get("tvf_resize_params") or [
        {"size": [s[-1], s[-1]] if strategy == "resize-naive" else s[-1], "interpolation": interps[i]}
        for i, s in enumerate(sizes)
    ]
    crops = cfg.get("tvf_crop_params") or [{"output_size": list(s[-2:])} for s in sizes]
    norms = cfg.get("tvf_normalize_params") or [{"mean": m, "std": s} for m, s in zip(cfg["means"], cfg["stds"], strict=True)]
    if not len(resize) == len(crops) == len(norms) == n:
        raise ValueError(f"preprocessor config lists {n} input sizes but {len(resize)} resize, {len(crops)} crop and "
                         f"{len(norms)} normalisation entries; they must match")
    out = []
    for r, c, m in zip(resize, crops, norms, strict=True):
        size = r["size"]
        out.append(TowerTransform(
            size=tuple(size) if isinstance(size, (list, tuple)) else int(size),
            crop=tuple(c["output_size"]) if isinstance(c["output_size"], (list, tuple)) else (c["output_size"],) * 2,
            interpolation=_interpolation(r.get("interpolation", "bicubic")),
            mean=tuple(float(x) for x in m["mean"]), std=tuple(float(x) for x in m["std"]),
        ))
    return out


def to_pil(image: Any) -> Image.Image:
    """PIL image or uint8 (H, W, 3) array -> RGB PIL image; ValueError for anything else."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[-1] == 3 and image.dtype == np.uint8:
        return Image.fromarray(image)
    raise ValueError(
        f"image of type {type(image).__name__} (shape {getattr(image, 'shape', None)}, "
        f"dtype {getattr(image, 'dtype', None)}) not supported; pass a PIL image or a uint8 numpy array (H, W, 3)"
    )


def letterbox(image: Image.Image, fill: tuple[int, ...]) -> Image.Image:
    """Pad to a square with a symmetric border of colour ``fill`` (the longer side is kept)."""
    (w, h), side = image.size, max(image.size)
    pad_w, pad_h = (side - w) // 2, (side - h) // 2
    return TVF.pad(image, [pad_w, pad_h, pad_w, pad_h], fill=fill, padding_mode="constant")


# follows OpenVLA c8f03f48 prismatic/extern/hf/processing_prismatic.py PrismaticImageProcessor (MIT, see NOTICE):
# the same steps and parameters, so pixel values are identical.
class ImageTransform:
    """PIL / uint8 HxWx3 image -> (3 * towers, H, W) float32 tensor, as OpenVLA's image processor.

    Args:
        cfg: a ``preprocessor_config.json`` dict: ``use_fused_vision_backbone``, ``image_resize_strategy``,
            ``input_sizes`` [(3, H, W)] per tower, ``interpolations``, ``means``, ``stds`` (optionally the
            ``tvf_*_params`` OpenVLA saves).
    """

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.config = dict(cfg)
        self.towers = tower_transforms(self.config)
        self.strategy = self.config.get("image_resize_strategy", "resize-naive")
        self.fill = tuple(int(x * 255) for x in self.towers[-1].mean)  # OpenVLA: the last tower's mean colour

    @property
    def image_size(self) -> int:
        return int(self.towers[0].crop[-1])

    def __call__(self, image: Any) -> torch.Tensor:
        img = to_pil(image)
        if self.strategy == "letterbox":
            img = letterbox(img, self.fill)
        parts = []
        for t in self.towers:
            size = list(t.size) if isinstance(t.size, tuple) else t.size
            resized = TVF.center_crop(TVF.resize(img, size, interpolation=t.interpolation), list(t.crop))
            parts.append(TVF.normalize(TVF.to_tensor(resized), list(t.mean), list(t.std)))
        return torch.cat(parts, dim=0)


def preprocessor_config(
    timm_model_ids: list[str], image_sizes: list[int], image_resize_strategy: str, use_fused_vision_backbone: bool
) -> dict[str, Any]:
    """OpenVLA's ``preprocessor_config.json`` fields for towers ``timm_model_ids`` (mean / std / interpolation
    from timm's pretrained configs of those ids)."""
    from timm.models import get_pretrained_cfg

    check_choice("image_resize_strategy", image_resize_strategy, RESIZE_STRATEGIES)
    means, stds, interps = [], [], []
    for timm_id in timm_model_ids:
        pcfg = get_pretrained_cfg(timm_id)
        if pcfg is None:
            raise ValueError(f"timm has no pretrained config for {timm_id!r}; cannot derive its normalisation")
        means.append(list(pcfg.mean))
        stds.append(list(pcfg.std))
        interps.append(pcfg.interpolation or "bicubic")
    return {
        "image_processor_type": "PrismaticImageProcessor",
        "processor_class": "PrismaticProcessor",
        "use_fused_vision_backbone": use_fused_vision_backbone,
        "image_resize_strategy": image_resize_strategy,
        "input_sizes": [[3, s, s] for s in image_sizes],
        "interpolations": interps,
        "means": means,
        "stds": stds,
    }
