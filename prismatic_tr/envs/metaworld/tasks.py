"""Facts of the MetaWorld adapter, in one place: the task set, instructions, step caps, cameras, state.

Tasks (MT10, MetaWorld v3): the ten tasks of MetaWorld's own MT10 benchmark (``metaworld.MT10``), one instruction
each in OpenVLA's prompt form (lower case, imperative; the prompt wraps it as "What action should the robot take
to {instruction}?"). ``max_steps`` is the episode cap: 1.5 x the scripted expert's 95th percentile of steps to
success over demonstration seeds 0-49, rounded up to 10 (MetaWorld's own ``max_path_length`` is 500)::

    task                      expert steps: mean / p95 / max, success of 50     cap
    reach-v3                   48 /  63 /  73   50/50                           100
    push-v3                    62 /  71 /  74   50/50                           110
    pick-place-v3              53 /  59 /  62   50/50                            90
    door-open-v3               83 / 107 / 114   48/50 (2 not in 500 steps)      170
    drawer-open-v3             89 /  92 /  93   50/50                           140
    drawer-close-v3            78 /  79 /  79   50/50                           120
    button-press-topdown-v3    66 /  75 /  75   50/50                           120
    peg-insert-side-v3        113 / 186 / 352   46/50 (4 not in 500 steps)      280
    window-open-v3             87 /  95 /  96   50/50                           150
    window-close-v3            81 /  87 /  88   50/50                           140

measured with metaworld 3.1.1 / mujoco 3.3.0 (no rendering; the cap was 500 for this table) by
``python -c "from prismatic_tr.envs.metaworld.rollout import expert_table; print(expert_table(range(50), 500))"``.

Cameras: the primary (third-person) image is MetaWorld's fixed ``corner3`` camera, which sees the whole table,
every task's objects and the goal markers without the arm in front of them (``corner``, ``corner2`` and ``corner4``
were compared: ``corner``'s arm hides objects, ``corner2`` shows them smallest, ``corner4`` cuts off the left of the
table); the wrist image is the gripper camera ``gripperPOV``. MetaWorld's cameras are defined upside down (their
``xyaxes`` / ``euler`` point the image's up axis down), so every frame is flipped vertically (rows reversed) after
rendering; after the flip the table is at the bottom of the ``corner3`` image.

Rendering: reflections are off (no visible change) and so are shadows by default (``RENDER_SHADOWS``; the arm's
shadow is all that is lost, the wrist camera and the state still give the gripper's height). With OSMesa on a
2-core Xeon (AMX), one 224 x 224 ``corner3`` frame took ~124 ms with both, ~91 ms without reflections, ~19 ms
without either (``mujoco.Renderer``, pick-place-v3, 2026-11-26); a whole step with both cameras ~50 ms without
shadows and ~250 ms with them, by ``expert_table(range(3), image_size=224, shadows=...)`` (:mod:`.rollout`), with
another job on the other core.

State (7,) float32 (``STATE_FIELDS``, :func:`state_of`): MetaWorld's observation vector ``obs[0:3]`` (the end
effector's x, y, z in metres, world frame: x to the robot's right, y away from its base, z up), ``obs[3]`` (the
gripper's opening: the fingers' distance / 0.1 m, clipped to [0, 1]: 1 open, 0 closed), as the tabletop task's
state, then ``obs[-3:]``, the goal's x, y, z: what MetaWorld's goal-observable environments (the MT benchmarks')
put in every observation. The goal is part of the state because a camera barely shows it: reach's, push's and
pick-place's goal markers are spheres of a few pixels in a 224 px ``corner3`` frame, and a policy trained on the
4-D state alone sent the hand to the same place whatever the goal (``benchmarks/metaworld_goal_reach.py``, docs/guides/metaworld.md).
Where a task's objects are (the puck, the peg, the door, the drawer, the window) only the cameras tell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

THIRD_PERSON_CAMERA = "corner3"     # observation "image" (primary camera)
WRIST_CAMERA = "gripperPOV"         # observation "wrist_image"
DEFAULT_IMAGE_SIZE = 224            # frames are image_size x image_size RGB uint8
STATE_FIELDS = ("effector_x", "effector_y", "effector_z", "gripper_open", "goal_x", "goal_y", "goal_z")
STATE_DIM = len(STATE_FIELDS)       # obs[0:3], obs[3], obs[-3:] (module docstring)
METAWORLD_MAX_PATH_LENGTH = 500     # MetaWorld's own episode limit; no cap may exceed it
RENDER_SHADOWS = False              # shadows cost 6x the render time on a CPU (module docstring)


@dataclass(frozen=True)
class MetaWorldTask:
    """One MetaWorld v3 task: its environment name, the instruction a policy gets, the episode's step cap."""

    name: str
    instruction: str
    max_steps: int


TASKS: dict[str, MetaWorldTask] = {t.name: t for t in (
    MetaWorldTask("reach-v3", "reach the goal position", 100),
    MetaWorldTask("push-v3", "push the puck to the goal", 110),
    MetaWorldTask("pick-place-v3", "pick the puck and place it at the goal", 90),
    MetaWorldTask("door-open-v3", "open the door", 170),
    MetaWorldTask("drawer-open-v3", "open the drawer", 140),
    MetaWorldTask("drawer-close-v3", "close the drawer", 120),
    MetaWorldTask("button-press-topdown-v3", "press the button down from the top", 120),
    MetaWorldTask("peg-insert-side-v3", "insert the peg into the hole in the side of the box", 280),
    MetaWorldTask("window-open-v3", "slide the window open", 150),
    MetaWorldTask("window-close-v3", "slide the window closed", 140),
)}
MT10 = tuple(TASKS)
assert all(t.max_steps <= METAWORLD_MAX_PATH_LENGTH for t in TASKS.values())


def metaworld_task(name: str) -> MetaWorldTask:
    """The task called ``name``; ValueError naming the allowed names otherwise."""
    if name not in TASKS:
        raise ValueError(f"MetaWorld task {name!r} is not allowed; choose one of {list(TASKS)}")
    return TASKS[name]


def check_image_size(size: int) -> int:
    """``size`` if it is an allowed frame size (an integer 32 ... 480); ValueError otherwise."""
    if isinstance(size, bool) or not isinstance(size, int) or not 32 <= size <= 480:
        raise ValueError(f"image size {size!r} is not allowed; use an integer from 32 to 480 (MetaWorld's offscreen "
                         "buffer is 480 x 480)")
    return size


def state_of(raw: np.ndarray) -> np.ndarray:
    """(7,) float32 state (``STATE_FIELDS``) of MetaWorld's raw observation vector ``raw`` (39,): ``raw[0:4]`` and
    the goal ``raw[-3:]``."""
    raw = np.asarray(raw)
    if raw.ndim != 1 or raw.shape[0] < 7:
        raise ValueError(f"a MetaWorld observation vector is 1-D with the goal last (39,), not {raw.shape}")
    return np.concatenate([raw[:4], raw[-3:]]).astype(np.float32)
