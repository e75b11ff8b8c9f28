"""What each patch of a MetaWorld camera frame shows: the task's object, the goal marker, the gripper.

MuJoCo renders a segmentation of the same camera the policy sees (:class:`~prismatic_tr.envs.metaworld.env.
MetaWorldEnv`'s frames, flipped upright the same way); each pixel names the geom or site in front. A pixel is

* ``gripper``: a geom of the hand, its claws or pads, or one of the end-effector sites;
* ``goal``: MetaWorld's ``goal`` site (the marker the task is judged against; absent in tasks without one);
* ``object``: a geom of a body tree that belongs to neither the robot, the table, the wall nor the mocap (the puck,
  the peg, the door, the drawer, the button box, ...).

A patch of the ``grid`` x ``grid`` grid (16 x 16 for 224 px frames and 14 px patches: the policy's tokens, row-major
as the vision towers number them) shows a label when at least ``min_pixels`` of its pixels do. Knows nothing about
reduction: :mod:`prismatic_tr.bench.vla.metaworld_recall` counts which labelled patches a selection keeps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prismatic_tr.envs.metaworld.env import MetaWorldEnv, import_mujoco

LABELS = ("object", "goal", "gripper")
GRIPPER_BODIES = frozenset({"hand", "rightclaw", "rightpad", "leftclaw", "leftpad"})
GRIPPER_SITES = frozenset({"endEffector", "rightEndEffector", "leftEndEffector"})
NOT_OBJECT_ROOTS = frozenset({"tablelink", "RetainingWall", "base", "mocap"})  # the scene's and the robot's trees
GOAL_SITE = "goal"


class PatchLabeller:
    """Segmentation renders of ``env``'s cameras turned into per-patch labels; ``close()`` frees its GL context.

    >>> with PatchLabeller(env) as labeller:
    ...     labels = labeller.labels("corner3")   # {"object": (256,) bool, "goal": ..., "gripper": ...}
    """

    def __init__(self, env: MetaWorldEnv, grid: int = 16, min_pixels: int = 1) -> None:
        size = env.image_size
        if grid < 1 or size % grid:
            raise ValueError(f"grid={grid!r} is not allowed; use a divisor of the frame size {size}")
        if min_pixels < 1:
            raise ValueError(f"min_pixels={min_pixels!r} is not allowed; use an integer >= 1")
        mujoco = import_mujoco()
        self.env, self.grid, self.min_pixels = env, grid, min_pixels
        model = env.env.model
        self._renderer = mujoco.Renderer(model, size, size)
        self._renderer.enable_segmentation_rendering()
        self._geom_label, self._site_label = _id_labels(mujoco, model)
        self._types = (int(mujoco.mjtObj.mjOBJ_GEOM), int(mujoco.mjtObj.mjOBJ_SITE))

    def pixel_labels(self, camera: str) -> np.ndarray:
        """(S, S) int8: per pixel the index into :data:`LABELS` of what it shows, -1 for anything else."""
        self._renderer.update_scene(self.env.env.data, camera=camera)
        seg = np.ascontiguousarray(self._renderer.render()[::-1])  # upright, as MetaWorldEnv.render flips
        ids, types = seg[..., 0], seg[..., 1]
        out = np.full(ids.shape, -1, dtype=np.int8)
        for kind, table in zip(self._types, (self._geom_label, self._site_label), strict=True):
            hit = (types == kind) & (ids >= 0) & (ids < len(table))
            out[hit] = table[ids[hit]]
        return out

    def labels(self, camera: str) -> dict[str, np.ndarray]:
        """``{label: (grid * grid,) bool}``: the patches (row-major) at least ``min_pixels`` of whose pixels show it."""
        pixels = self.pixel_labels(camera)
        s = pixels.shape[0] // self.grid
        blocks = pixels.reshape(self.grid, s, self.grid, s).transpose(0, 2, 1, 3).reshape(self.grid ** 2, s * s)
        return {name: (blocks == i).sum(axis=1) >= self.min_pixels for i, name in enumerate(LABELS)}

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def __enter__(self) -> PatchLabeller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _id_labels(mujoco: Any, model: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per geom and per site of ``model``: the index into :data:`LABELS` it counts as, or -1."""
    def name(kind: Any, i: int) -> str | None:
        return mujoco.mj_id2name(model, kind, i)

    body = mujoco.mjtObj.mjOBJ_BODY
    geoms = np.full(model.ngeom, -1, dtype=np.int8)
    for g in range(model.ngeom):
        b = int(model.geom_bodyid[g])
        root = name(body, int(model.body_rootid[b]))
        if name(body, b) in GRIPPER_BODIES:
            geoms[g] = LABELS.index("gripper")
        elif b != 0 and root not in NOT_OBJECT_ROOTS:
            geoms[g] = LABELS.index("object")
    sites = np.full(model.nsite, -1, dtype=np.int8)
    for s in range(model.nsite):
        site = name(mujoco.mjtObj.mjOBJ_SITE, s)
        if site == GOAL_SITE:
            sites[s] = LABELS.index("goal")
        elif site in GRIPPER_SITES:
            sites[s] = LABELS.index("gripper")
    return geoms, sites
