"""The features OpenVLA takes from a timm tower: block ``depth - 2``'s output without the prefix tokens.

``PenultimateForward`` replaces a tower's ``forward`` on the instance (OpenVLA does the same with a
``partial`` of ``get_intermediate_layers``). Exact saving: ``run_last_block=False`` skips the last block,
whose output OpenVLA discards (see :mod:`prismatic_tr.vla.exact`).
"""

from __future__ import annotations

import torch
from timm.models.vision_transformer import VisionTransformer


def penultimate_patch_features(vit: VisionTransformer, pixel_values: torch.Tensor, run_last_block: bool) -> torch.Tensor:
    """Output of block ``depth - 2`` without prefix tokens: (B, 3, H, W) -> (B, (H / p) * (W / p), D).

    OpenVLA calls ``vit.get_intermediate_layers(n={depth - 2})``, which runs every block and discards the last
    one's output. With ``run_last_block=False`` the last block is skipped: the same tensor, bit for bit, for
    1 / depth less work. The steps follow timm's ``_intermediate_layers`` (0.9.10 and 1.0.x): patch embedding,
    position embedding, patch dropout, pre-norm, blocks; no final norm.
    """
    if run_last_block:
        return vit.get_intermediate_layers(pixel_values, n={len(vit.blocks) - 2})[0]  # tuple (0.9) / list (1.x)
    x = vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(pixel_values))))
    for block in vit.blocks[: len(vit.blocks) - 1]:
        x = block(x)
    return x[:, vit.num_prefix_tokens :]


class PenultimateForward:
    """Replacement ``forward`` of a featurizer instance (picklable, unlike a lambda)."""

    def __init__(self, vit: VisionTransformer, run_last_block: bool = False) -> None:
        self.vit, self.run_last_block = vit, run_last_block

    def __call__(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return penultimate_patch_features(self.vit, pixel_values, self.run_last_block)
