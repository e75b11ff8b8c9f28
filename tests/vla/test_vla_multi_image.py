"""Several images per sample (OpenVLA-OFT layout): every image reduced on its own, counts exact for any ratio.

The backbone here is a stand-in that returns its input features, laid out as OFT's backbone lays out its
output: (B, n * P, D), image after image, with ``get_num_patches()`` per image and
``get_num_images_in_input()`` / ``set_num_images_in_input()``. The test against OFT's own code is in
``test_vla_oft_reference.py``.
"""

from __future__ import annotations

import pytest
import torch
from helpers.calls import run_and_kept
from torch import nn

from prismatic_tr.bench.measure.ops import find_host_syncs
from prismatic_tr.reducers import TokenReducer
from prismatic_tr.vla import (
    apply_token_reduction_to_vla,
    get_token_reduction,
    monkey_patch_vision_backbone_with_reduction,
    visual_token_count,
)
from prismatic_tr.vla.layout import TokenLayout, token_layout

P, D = 256, 8  # patches per image (a 16 x 16 grid), feature width


class FeatureBackbone(nn.Module):
    """OFT-style backbone API around precomputed features: forward((B, n * P, D)) returns them."""

    def __init__(self) -> None:
        super().__init__()
        self.num_images_in_input = 1

    def get_num_patches(self) -> int:
        return P

    def get_num_images_in_input(self) -> int:
        return self.num_images_in_input

    def set_num_images_in_input(self, n: int) -> None:
        self.num_images_in_input = n

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return features


class FeatureVLA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.vision_backbone = FeatureBackbone()
        self.projector = nn.Identity()


def features(batch: int, images: int, seed: int = 0) -> torch.Tensor:
    """(batch, images * P, D) random features; channel 0 holds the token's position inside its image."""
    x = torch.randn(batch, images * P, D, generator=torch.Generator().manual_seed(seed))
    x[..., 0] = torch.arange(P, dtype=x.dtype).repeat(images)
    return x


# images, method, ratio, merge -> patch tokens kept per image (K); the projector receives images * K
CASES = [
    (1, "topk_magnitude", 0.3, 2, 77),
    (2, "topk_magnitude", 0.3, 2, 77),
    (3, "topk_magnitude", 0.3, 2, 77),  # was 230 tokens with OFT counting 228 (issue 9)
    (3, "attention_score", 0.5, 2, 128),
    (3, "random", 0.1, 2, 26),
    (2, "random", 0.75, 2, 192),
    (3, "spatial_pool", 0.5, 2, 64),
    (2, "spatial_pool", 0.5, 4, 16),
    (3, "topk_magnitude", 1.0, 2, 256),
]


@pytest.mark.parametrize("images,method,ratio,merge,k", CASES)
def test_every_image_keeps_the_same_k_and_oft_counts_match(images, method, ratio, merge, k):
    vla = FeatureVLA()
    vla.vision_backbone.set_num_images_in_input(images)
    x = features(2, images)
    with monkey_patch_vision_backbone_with_reduction(vla, method, ratio, merge) as handle:
        out = vla.vision_backbone(x)
        backbone = vla.vision_backbone
        assert out.shape == (2, images * k, D)
        assert backbone.get_num_patches() == handle.reduced_num_patches_per_image() == k
        assert backbone.get_num_patches() * backbone.get_num_images_in_input() == out.shape[1]
        assert handle.reduced_num_patches() == visual_token_count(vla) == out.shape[1]
    assert visual_token_count(vla) == images * P


@pytest.mark.parametrize("images,method,ratio,merge,k", [c for c in CASES if c[1] != "random"])
def test_each_block_is_that_image_reduced_alone(images, method, ratio, merge, k):
    """Image i's K tokens sit in block i, equal to reducing image i by itself (so images are independent)."""
    vla = FeatureVLA()
    x = features(2, images)
    alone = TokenReducer(method=method, keep_ratio=ratio, spatial_merge_size=merge)
    apply_token_reduction_to_vla(vla, method, ratio, merge)
    out = vla.vision_backbone(x)
    for i in range(images):
        assert torch.equal(out[:, i * k : (i + 1) * k], alone(x[:, i * P : (i + 1) * P])), f"image {i}"


@pytest.mark.parametrize("method", ["topk_magnitude", "attention_score", "random"])
def test_kept_tokens_stay_in_their_image_in_original_order(method):
    vla = FeatureVLA()
    x = features(3, 3, seed=4)
    apply_token_reduction_to_vla(vla, method, 0.3)
    out = vla.vision_backbone(x)
    k = get_token_reduction(vla).reduced_num_patches_per_image()
    for i in range(3):
        block = out[:, i * k : (i + 1) * k]
        positions = block[..., 0]
        assert torch.all(positions[:, 1:] > positions[:, :-1]), "order inside an image must be kept"
        source = x[:, i * P : (i + 1) * P]
        picked = source.gather(1, positions.long().unsqueeze(-1).expand(-1, -1, D))
        assert torch.equal(block, picked), f"block {i} must hold tokens of image {i} only"


def test_random_draws_each_image_independently():
    vla = FeatureVLA()
    same = features(1, 1).repeat(1, 3, 1)  # three identical images
    with monkey_patch_vision_backbone_with_reduction(vla, "random", 0.25, seed=3):
        _, kept = run_and_kept(vla, lambda: vla.vision_backbone(same))  # (B, n * K): image i's at i * P + j
    idx = kept.reshape(3, 64) - torch.arange(3)[:, None] * P  # (B * n, K) patch indices within each image
    assert idx.shape == (3, 64)
    assert not torch.equal(idx[0], idx[1]) and not torch.equal(idx[1], idx[2])


def test_changing_the_image_count_after_attaching_stays_exact():
    vla = FeatureVLA()
    backbone = vla.vision_backbone
    apply_token_reduction_to_vla(vla, "topk_magnitude", 0.3)  # attached with one image
    for images in (3, 1, 2):
        backbone.set_num_images_in_input(images)
        out = backbone(features(1, images))
        assert out.shape[1] == images * 77 == backbone.get_num_patches() * backbone.get_num_images_in_input()
        assert get_token_reduction(vla).reduced_num_patches() == out.shape[1]


@pytest.mark.parametrize("tokens", [2 * P + 7, P - 1, 3 * P - 1])
def test_a_token_count_that_is_no_whole_number_of_images_is_an_error(tokens):
    vla = FeatureVLA()
    apply_token_reduction_to_vla(vla, "topk_magnitude", 0.5)
    with pytest.raises(ValueError, match=f"returned {tokens} tokens per sample.*{P} patch tokens"):
        vla.vision_backbone(torch.randn(1, tokens, D))


@pytest.mark.parametrize(
    "tokens,max_prefix,keep,expected",
    [
        (3 * P, 0, True, TokenLayout(0, 3, P)),
        (P, 5, True, TokenLayout(0, 1, P)),
        (P + 5, 5, True, TokenLayout(5, 1, P)),
        (P + 5, 5, False, TokenLayout(0, 1, P + 5)),  # unprotected prefix tokens are reduced with the patches
        (P + 6, 5, True, None),
        (2 * P + 1, 5, True, None),  # prefix tokens come with a single image only
        (17, None, True, TokenLayout(0, 1, 17)),  # a backbone that does not report P: one image
    ],
)
def test_token_layout(tokens, max_prefix, keep, expected):
    per_image = None if max_prefix is None else P
    if expected is None:
        with pytest.raises(ValueError, match=f"returned {tokens} tokens"):
            token_layout(tokens, per_image, max_prefix or 0, keep)
    else:
        assert token_layout(tokens, per_image, max_prefix or 0, keep) == expected


@pytest.mark.parametrize("method", ["topk_magnitude", "spatial_pool", "random"])
def test_per_image_reduction_has_no_host_sync(method):
    vla = FeatureVLA()
    apply_token_reduction_to_vla(vla, method, 0.3)
    assert find_host_syncs(vla.vision_backbone, features(2, 3)) == {}
