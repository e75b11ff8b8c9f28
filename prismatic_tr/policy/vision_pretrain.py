"""Supervised pretraining of the policy's vision towers on rendered frames of the tabletop task.

OpenVLA's towers start from DINOv2 and SigLIP, pretrained on web images: they already say what is where. No
weights can be downloaded here, and towers trained from random weights by the action loss alone did not learn
to find the named object in 3600-6000 steps (``benchmarks/results/policy_training``). This stage gives the
towers what pretraining gives OpenVLA's: on random frames (random scene, random effector pose), a linear head
on the fused patch features ``(B, 256, D)`` (the projector's input) is trained with the towers to predict each
patch's object colour and shape, that object's position relative to the effector and the effector's height
(``prismatic_tr.envs.patch_labels``: local labels only). The head is then dropped; the VLA fine-tuning that
follows trains on the action tokens alone, as OpenVLA's fine-tuning does.

Scenes are seeds ``500,000 + seed * 100,000`` on, one per ``VIEWS_PER_SCENE`` frames (:func:`scene_seeds`); they
must stay in the "vision_pretraining" seed split (500,000-999,999, :mod:`prismatic_tr.envs.splits`): ``seed`` 0-4
fit runs of up to 100,000 scenes; ``seed=5`` would draw the validation episodes' scenes (from 1,000,000) and is a
``ValueError``.

    history = pretrain_vision(vla, processor, VisionPretrainConfig(steps=600))
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from prismatic_tr.envs.patch_labels import (
    NUM_COLOR_CLASSES,
    NUM_SHAPE_CLASSES,
    OFFSET_SCALE,
    PatchLabels,
    patch_labels,
)
from prismatic_tr.envs.render import Renderer
from prismatic_tr.envs.scene import TaskConfig, sample_scene
from prismatic_tr.envs.spec import WORKSPACE_XY, WORKSPACE_Z
from prismatic_tr.envs.splits import VISION_PRETRAINING, check_seeds, seed_split

FRAME_SEED_OFFSET = seed_split(VISION_PRETRAINING).first  # 500,000: scenes of seed 0's pretraining frames
SCENES_PER_SEED = 100_000    # seed s starts at FRAME_SEED_OFFSET + s * SCENES_PER_SEED
VIEWS_PER_SCENE = 8          # frames rendered per sampled scene (the table texture is drawn once per scene)


@dataclass(frozen=True)
class VisionPretrainConfig:
    """Steps, batch size, AdamW learning rate (linear warm-up over ``warmup_steps``), seed, and the scenes'
    object counts (uniform in [min_objects, max_objects])."""

    steps: int = 600
    batch_size: int = 32
    learning_rate: float = 1.5e-3
    warmup_steps: int = 50
    seed: int = 0
    min_objects: int = 1
    max_objects: int = 5

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "warmup_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; use an integer >= 1")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate!r} is not allowed; use a number > 0")
        TaskConfig(self.min_objects, self.max_objects)  # validates the object counts
        scene_seeds(self.seed, self.steps, self.batch_size,
                    job=f"seed={self.seed!r} with {self.steps} steps x batch {self.batch_size}")


def scene_seeds(seed: int, steps: int, batch_size: int, job: str | None = None) -> range:
    """The scene seeds a pretraining run draws (``ceil(batch_size / VIEWS_PER_SCENE)`` a step), checked against
    the "vision_pretraining" seed split (ValueError naming ``job`` and the split they would enter)."""
    count = steps * math.ceil(batch_size / VIEWS_PER_SCENE)
    return check_seeds(VISION_PRETRAINING, FRAME_SEED_OFFSET + seed * SCENES_PER_SEED, count, job)


class PatchHeads(nn.Module):
    """One linear map per patch: ``(B, N, D)`` -> colour logits (B, N, C), shape logits (B, N, S), offset
    (B, N, 2), height (B, N)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, NUM_COLOR_CLASSES + NUM_SHAPE_CLASSES + 3)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.proj(features)
        c, s = NUM_COLOR_CLASSES, NUM_SHAPE_CLASSES
        return out[..., :c], out[..., c : c + s], out[..., c + s : c + s + 2], out[..., c + s + 2]


class FrameSampler:
    """Random frames of the task with their patch labels: batches of ``(images, labels)``."""

    def __init__(self, cfg: VisionPretrainConfig) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.task = TaskConfig(cfg.min_objects, cfg.max_objects)
        self.next_scene = scene_seeds(cfg.seed, cfg.steps, cfg.batch_size).start

    def batch(self, size: int) -> tuple[list[np.ndarray], list[PatchLabels]]:
        images, labels = [], []
        while len(images) < size:
            scene = sample_scene(self.next_scene, self.task)
            self.next_scene += 1
            renderer = Renderer(scene)
            for _ in range(min(VIEWS_PER_SCENE, size - len(images))):
                x, y = self.rng.uniform(-WORKSPACE_XY, WORKSPACE_XY, size=2)
                effector = (float(x), float(y), float(self.rng.uniform(*WORKSPACE_Z)))
                images.append(renderer.render(effector, gripper_open=bool(self.rng.random() < 0.8)))
                labels.append(patch_labels(scene, effector))
        return images, labels


def _targets(labels: list[PatchLabels]) -> dict[str, torch.Tensor]:
    return {"color": torch.from_numpy(np.stack([lb.color for lb in labels])),
            "shape": torch.from_numpy(np.stack([lb.shape for lb in labels])),
            "offset": torch.from_numpy(np.stack([lb.offset for lb in labels])),
            "height": torch.tensor([lb.height for lb in labels], dtype=torch.float32)}


def pretrain_losses(heads: PatchHeads, features: torch.Tensor, targets: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Losses and metrics of one batch: features (B, N, D); targets from :func:`_targets` (N patches each)."""
    color, shape, offset, height = heads(features.float())
    on_object = targets["color"] > 0
    n_on = on_object.sum().clamp(min=1)
    offset_huber = F.smooth_l1_loss(offset, targets["offset"], reduction="none").sum(-1)
    offset_loss = (offset_huber * on_object).sum() / n_on
    height_loss = (height - targets["height"][:, None]).pow(2).mean()
    color_loss = F.cross_entropy(color.flatten(0, 1), targets["color"].flatten())
    shape_loss = F.cross_entropy(shape.flatten(0, 1), targets["shape"].flatten())
    with torch.no_grad():
        color_acc = (color.argmax(-1) == targets["color"])[on_object].float().mean()
        shape_acc = (shape.argmax(-1) == targets["shape"])[on_object].float().mean()
        offset_err = (offset - targets["offset"]).pow(2).sum(-1).sqrt()
        offset_cm = (offset_err * on_object).sum() / n_on * 100 * OFFSET_SCALE
    return {"loss": color_loss + shape_loss + offset_loss + height_loss, "color_acc_on_objects": color_acc,
            "shape_acc_on_objects": shape_acc, "offset_error_cm": offset_cm}


def pretrain_vision(
    vla: nn.Module, processor: object, cfg: VisionPretrainConfig,
    log: Callable[[dict[str, float]], None] | None = None, log_every: int = 50,
) -> list[dict[str, float]]:
    """Train ``vla.vision_backbone`` (in place) with :class:`PatchHeads` on rendered frames; returns the
    per-log history (step, loss, colour and shape accuracy on object patches, offset error in cm, s/step)."""
    torch.manual_seed(cfg.seed)
    backbone = vla.vision_backbone
    heads = PatchHeads(int(backbone.embed_dim))
    params = [p for p in backbone.parameters() if p.requires_grad] + list(heads.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg.warmup_steps))
    sampler, history = FrameSampler(cfg), []
    was_training = backbone.training
    backbone.train()
    start = time.perf_counter()
    for step in range(1, cfg.steps + 1):
        images, labels = sampler.batch(cfg.batch_size)
        pixel_values = processor(["In:"] * len(images), images)["pixel_values"]
        metrics = pretrain_losses(heads, backbone(pixel_values), _targets(labels))
        metrics["loss"].backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % log_every == 0 or step == cfg.steps:
            row = {"step": float(step), **{k: float(v.detach()) for k, v in metrics.items()},
                   "step_time_s": (time.perf_counter() - start) / step}
            history.append(row)
            if log is not None:
                log(row)
    backbone.train(was_training)
    return history
