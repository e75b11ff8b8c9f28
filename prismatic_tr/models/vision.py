"""Vision backbone (timm ViTs, second-to-last block, patch tokens only) and the MLP projector of OpenVLA.

Structure follows OpenVLA's Hugging Face remote code (``PrismaticVisionBackbone``, ``PrismaticProjector``):
the featurizers are timm ``VisionTransformer`` instances whose ``forward`` is replaced, on the instance, by
"features of the second-to-last block with the prefix tokens (CLS, registers) dropped".
"""

from __future__ import annotations

from typing import Any

import timm
import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn


def penultimate_patch_features(vit: VisionTransformer, pixel_values: torch.Tensor) -> torch.Tensor:
    """Features of block ``depth - 2`` without prefix tokens.

    Args:
        vit: a timm VisionTransformer.
        pixel_values: (B, 3, H, W).
    Returns:
        (B, N_patch, D) with N_patch = (H / patch) * (W / patch).
    """
    out = vit.get_intermediate_layers(pixel_values, n=[len(vit.blocks) - 2])
    return out[0]  # timm 0.9 returns a tuple, timm 1.x a list


class _PenultimateForward:
    """Replacement ``forward`` for a featurizer instance (picklable, unlike a lambda)."""

    def __init__(self, vit: VisionTransformer) -> None:
        self.vit = vit

    def __call__(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return penultimate_patch_features(self.vit, pixel_values)


def make_featurizer(timm_id: str, image_size: int, tiny_spec: dict[str, Any] | None) -> VisionTransformer:
    """Build a random-weight timm ViT whose ``forward`` returns penultimate patch features (B, N, D)."""
    if tiny_spec is not None:
        vit = VisionTransformer(**tiny_spec)
    else:
        vit = timm.create_model(timm_id, pretrained=False, num_classes=0, img_size=image_size)
    vit.forward = _PenultimateForward(vit)  # type: ignore[method-assign]
    return vit


class ReferenceVisionBackbone(nn.Module):
    """DINOv2 + SigLIP (fused, channels concatenated) or SigLIP alone; returns patch features.

    ``forward(pixel_values)``: (B, 3 * n_featurizers, H, W) -> (B, N_patch, embed_dim). For the fused backbone
    channels 0-2 are the DINOv2-normalised image and 3-5 the SigLIP-normalised one.
    """

    def __init__(self, timm_ids: list[str], image_sizes: list[int], tiny_specs: list[dict] | None) -> None:
        super().__init__()
        specs = tiny_specs if tiny_specs is not None else [None] * len(timm_ids)
        self.use_fused_vision_backbone = len(timm_ids) == 2
        self.featurizer = make_featurizer(timm_ids[0], image_sizes[0], specs[0])
        self.fused_featurizer = (
            make_featurizer(timm_ids[1], image_sizes[1], specs[1]) if self.use_fused_vision_backbone else None
        )
        self.embed_dim = self.featurizer.embed_dim + (
            self.fused_featurizer.embed_dim if self.fused_featurizer is not None else 0
        )

    def get_num_patches(self) -> int:
        """Patch tokens per image produced by the (unreduced) featurizer."""
        return int(self.featurizer.patch_embed.num_patches)

    def get_num_images_in_input(self) -> int:
        """One image per sample (OpenVLA-OFT style API)."""
        return 1

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, N_patch, embed_dim); C = 6 for the fused backbone, 3 otherwise."""
        expected = 6 if self.use_fused_vision_backbone else 3
        if pixel_values.dim() != 4 or pixel_values.shape[1] != expected:
            raise ValueError(
                f"pixel_values has shape {tuple(pixel_values.shape)}; expected (B, {expected}, H, W) for this backbone"
            )
        pixel_values = pixel_values.to(self.featurizer.patch_embed.proj.weight.dtype)
        if self.fused_featurizer is None:
            return self.featurizer(pixel_values)
        img, img_fused = torch.split(pixel_values, [3, 3], dim=1)
        return torch.cat([self.featurizer(img), self.fused_featurizer(img_fused)], dim=2)


class ReferenceProjector(nn.Module):
    """OpenVLA's MLP projector, applied per token: (B, K, vision_dim) -> (B, K, llm_dim) for any K.

    Fused: fc1 vision->4*vision, GELU, fc2 ->llm, GELU, fc3 llm->llm. Single: fc1 vision->llm, GELU, fc2 llm->llm.
    """

    def __init__(self, use_fused_vision_backbone: bool, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.use_fused_vision_backbone = use_fused_vision_backbone
        self.vision_dim, self.llm_dim = vision_dim, llm_dim
        if use_fused_vision_backbone:
            self.fc1 = nn.Linear(vision_dim, 4 * vision_dim)
            self.fc2 = nn.Linear(4 * vision_dim, llm_dim)
            self.fc3 = nn.Linear(llm_dim, llm_dim)
            self.act_fn1, self.act_fn2 = nn.GELU(), nn.GELU()
        else:
            self.fc1 = nn.Linear(vision_dim, llm_dim)
            self.fc2 = nn.Linear(llm_dim, llm_dim)
            self.act_fn1 = nn.GELU()

    def forward(self, img_patches: torch.Tensor) -> torch.Tensor:
        """(B, K, vision_dim) -> (B, K, llm_dim)."""
        x = self.fc2(self.act_fn1(self.fc1(img_patches)))
        if self.use_fused_vision_backbone:
            x = self.fc3(self.act_fn2(x))
        return x
