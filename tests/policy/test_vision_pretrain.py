"""Patch labels of a frame (pure geometry) and the tower pretraining stage of the policy recipe."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prismatic_tr.envs import make_episode
from prismatic_tr.envs.patch_labels import COLOR_IDS, OFFSET_SCALE, SHAPE_IDS, patch_labels
from prismatic_tr.envs.spec import IMAGE_SIZE, WORKSPACE_Z, to_pixels
from prismatic_tr.models import build_processor, build_vla
from prismatic_tr.policy.vision_pretrain import VisionPretrainConfig, pretrain_vision


def _patch_of(u: float, v: float, grid: int = 16) -> int:
    size = IMAGE_SIZE / grid
    return int(v // size) * grid + int(u // size)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_patch_labels_name_each_object_under_its_centre(seed: int) -> None:
    env = make_episode(seed)
    effector = env.state.effector
    ex, ey, _ = effector
    labels = patch_labels(env.scene, effector)
    seen = 0
    for obj in env.scene.objects:
        u, v = to_pixels(obj.x, obj.y, effector)
        if not (0 <= u < IMAGE_SIZE and 0 <= v < IMAGE_SIZE):
            continue
        seen += 1
        i = _patch_of(u, v)
        assert labels.color[i] == COLOR_IDS[obj.color] and labels.shape[i] == SHAPE_IDS[obj.shape]
        np.testing.assert_allclose(labels.offset[i], [(obj.x - ex) / OFFSET_SCALE, (obj.y - ey) / OFFSET_SCALE],
                                   rtol=1e-5)
    assert seen >= 1
    # objects cover a few patches each, the table the rest; no label without an object, no offset either
    covered = labels.color > 0
    assert 0 < covered.sum() < 0.25 * covered.size
    assert (labels.shape[~covered] == 0).all() and (labels.offset[~covered] == 0).all()
    low, high = WORKSPACE_Z
    assert labels.height == pytest.approx(2 * (effector[2] - low) / (high - low) - 1)


def test_patch_labels_bad_grid() -> None:
    with pytest.raises(ValueError, match="grid=0"):
        patch_labels(make_episode(0).scene, (0.0, 0.0, 0.05), grid=0)


def test_vision_pretrain_bad_settings() -> None:
    with pytest.raises(ValueError, match="steps=0"):
        VisionPretrainConfig(steps=0)
    with pytest.raises(ValueError, match="learning_rate"):
        VisionPretrainConfig(learning_rate=0.0)
    with pytest.raises(ValueError):
        VisionPretrainConfig(min_objects=3, max_objects=2)
    # seed 5's scenes would start at 1,000,000: the validation episodes' layouts
    with pytest.raises(ValueError, match=r"seed=5 with 1000 steps x batch 32 is not allowed: .* overlap validation"):
        VisionPretrainConfig(steps=1000, batch_size=32, seed=5)
    VisionPretrainConfig(steps=1000, batch_size=32, seed=4)


def test_pretrain_vision_trains_the_towers_only() -> None:
    vla = build_vla("tiny", seed=0)
    processor = build_processor(vla.config)
    before = {k: v.clone() for k, v in vla.state_dict().items()}
    history = pretrain_vision(vla, processor, VisionPretrainConfig(steps=3, batch_size=4, warmup_steps=1), log_every=1)
    assert [int(h["step"]) for h in history] == [1, 2, 3]
    assert all(np.isfinite(h["loss"]) and 0.0 <= h["color_acc_on_objects"] <= 1.0 for h in history)
    assert all(0.0 <= h["shape_acc_on_objects"] <= 1.0 and h["offset_error_cm"] >= 0.0 for h in history)
    after = vla.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("vision_backbone.") for k in changed)
