"""Dense labels of a camera frame, per patch of the policy's 16 x 16 grid, from the scene's geometry.

They supervise the pretraining of the policy's vision towers (``prismatic_tr.policy.vision_pretrain``), the
stand-in for the web-scale pretraining that OpenVLA's DINOv2 / SigLIP towers bring. For the frame seen with
the effector (camera) at ``(ex, ey, ez)``, patch ``(row, col)`` gets:

- ``color``, ``shape``: 1 + the index (in ``spec.COLORS`` / ``spec.SHAPES``) of the object whose disc of radius
  ``OBJECT_RADIUS`` covers the patch centre (the nearest such object), 0 where none does;
- ``offset``: that object's centre relative to the effector, ``(x - ex, y - ey) / OFFSET_SCALE`` (0 where none);
- ``height``: the effector's height mapped to [-1, 1] over ``WORKSPACE_Z`` (the same for every patch).

Every label but the height is local: a patch is told about the object it shows, never about objects elsewhere
(task version 1's recipe also asked every patch where each colour's object was; that puts the whole scene in
every token, so dropping tokens would cost the policy nothing and its fidelity figures would flatter every
reducer). Finding the named object among the tokens is left to the language model, as in OpenVLA.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prismatic_tr.envs.scene import Scene
from prismatic_tr.envs.spec import (
    COLORS,
    IMAGE_SIZE,
    OBJECT_RADIUS,
    SHAPES,
    WORKSPACE_Z,
    to_pixels,
    view_half_width,
)

OFFSET_SCALE = 0.05  # metres per unit of the offset label (objects are at most ~0.4 m from the effector)
COLOR_IDS = {c: i + 1 for i, c in enumerate(COLORS)}
SHAPE_IDS = {s: i + 1 for i, s in enumerate(SHAPES)}
NUM_COLOR_CLASSES, NUM_SHAPE_CLASSES = len(COLORS) + 1, len(SHAPES) + 1


@dataclass(frozen=True)
class PatchLabels:
    """Labels of one frame on a ``grid x grid`` patch grid, row-major (the ViT's patch order).

    color, shape: (grid * grid,) int64; offset: (grid * grid, 2) float32; height: float.
    """

    color: np.ndarray
    shape: np.ndarray
    offset: np.ndarray
    height: float


def patch_labels(scene: Scene, effector: tuple[float, float, float], grid: int = 16) -> PatchLabels:
    """The labels of the frame of ``scene`` seen from ``effector`` (x, y, z metres); see the module docstring."""
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ValueError(f"grid={grid!r} is not allowed; use an integer >= 1")
    ex, ey, ez = effector
    centres = (np.arange(grid) + 0.5) * (IMAGE_SIZE / grid)            # patch centres, pixels
    cu, cv = np.meshgrid(centres, centres)                            # (grid, grid): u = column, v = row
    radius_px = OBJECT_RADIUS * (IMAGE_SIZE / 2) / view_half_width(ez)
    best = np.full((grid, grid), np.inf)
    color = np.zeros((grid, grid), dtype=np.int64)
    shape = np.zeros((grid, grid), dtype=np.int64)
    offset = np.zeros((grid, grid, 2), dtype=np.float32)
    for obj in scene.objects:
        u, v = to_pixels(obj.x, obj.y, effector)
        dist = np.hypot(cu - u, cv - v)
        hit = (dist <= radius_px) & (dist < best)
        best[hit] = dist[hit]
        color[hit], shape[hit] = COLOR_IDS[obj.color], SHAPE_IDS[obj.shape]
        offset[hit] = ((obj.x - ex) / OFFSET_SCALE, (obj.y - ey) / OFFSET_SCALE)
    low, high = WORKSPACE_Z
    height = float(2.0 * (ez - low) / (high - low) - 1.0)
    return PatchLabels(color.reshape(-1), shape.reshape(-1), offset.reshape(-1, 2), height)
