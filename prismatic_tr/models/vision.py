"""OpenVLA's vision backbone (timm towers, second-to-last block, patch tokens only) and MLP projector.

Structure and parameter names follow OpenVLA's ``PrismaticVisionBackbone`` / ``PrismaticProjector``
(openvla/openvla ``prismatic/extern/hf/modeling_prismatic.py``, MIT) so checkpoints map one to one; the
towers are plain timm ``VisionTransformer`` instances (LayerScale keeps timm's ``gamma``; the checkpoint's
``scale_factor`` is renamed at load/save, see ``checkpoint.py``) whose ``forward`` is replaced, on the
instance, by "features of the second-to-last block with the prefix tokens (CLS, registers) dropped".
"""

from __future__ import annotations

from typing import Any

import timm
import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from prismatic_tr.vit.penultimate import PenultimateForward


# follows timm 0.9.10 / 1.0.31 timm/models/vision_transformer.py VisionTransformer._intermediate_layers
# (Apache-2.0, see NOTICE): the same steps, so the features equal get_intermediate_layers' bit for bit.
def make_featurizer(timm_id: str, image_size: int, act_layer: str | None, kwargs: dict[str, Any] | None) -> VisionTransformer:
    """A random-weight timm tower as OpenVLA builds it, plus architecture overrides (small presets)."""
    vit = timm.create_model(timm_id, pretrained=False, num_classes=0, img_size=image_size, act_layer=act_layer,
                            **(kwargs or {}))
    vit.forward = PenultimateForward(vit)  # type: ignore[method-assign]
    return vit


# follows OpenVLA c8f03f48 prismatic/extern/hf/modeling_prismatic.py PrismaticVisionBackbone (MIT, see NOTICE):
# tower names and second-to-last-block patch features, so OpenVLA checkpoints load and see the same tokens.
class NativeVisionBackbone(nn.Module):
    """One tower (SigLIP, ...) or two fused ones (DINOv2 + SigLIP, channels of the input split, features
    concatenated); ``forward``: (B, 3 * towers, H, W) -> (B, N_patch, embed_dim)."""

    def __init__(
        self,
        timm_ids: list[str],
        image_sizes: list[int],
        act_layers: list[str | None] | None = None,
        tower_kwargs: list[dict[str, Any] | None] | None = None,
    ) -> None:
        super().__init__()
        n = len(timm_ids)
        acts = act_layers if act_layers is not None else [None] * n
        kwargs = tower_kwargs if tower_kwargs is not None else [None] * n
        self.use_fused_vision_backbone = n == 2
        self.featurizer = make_featurizer(timm_ids[0], image_sizes[0], acts[0], kwargs[0])
        self.fused_featurizer = (
            make_featurizer(timm_ids[1], image_sizes[1], acts[1], kwargs[1]) if self.use_fused_vision_backbone else None
        )
        self.embed_dim = self.featurizer.embed_dim + (
            self.fused_featurizer.embed_dim if self.fused_featurizer is not None else 0
        )

    @property
    def towers(self) -> list[VisionTransformer]:
        """The timm towers, featurizer first."""
        return [t for t in (self.featurizer, self.fused_featurizer) if t is not None]

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


# follows OpenVLA c8f03f48 prismatic/extern/hf/modeling_prismatic.py PrismaticProjector (MIT, see NOTICE): layer names
# and order, so OpenVLA checkpoint weights load unchanged.
class NativeProjector(nn.Module):
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


# v0.1 names
ReferenceVisionBackbone = NativeVisionBackbone
ReferenceProjector = NativeProjector
