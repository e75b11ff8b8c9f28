"""Facts of the tabletop task, in one place: frames, units, camera, action bounds, tolerances, vocabulary.

Frame and units
    Table frame in metres: ``x`` to the right of the image, ``y`` away from the camera (up the image),
    ``z`` up from the table top (0 = touching the table).

Camera (eye in hand)
    The camera sits on the gripper and looks straight down, so the image is centred on the effector's x-y:
    an object's offset from the image centre is its offset from the effector, and the effector's height is
    the zoom (the view spans ``2 * view_half_width(z)`` metres of table). The fingers are drawn at the
    centre (apart when open, together when closed). Beyond the table's edge (``TABLE_HALF``) is the floor.

Action (7-D, float, OpenVLA / Bridge convention)
    ====  ==========================  ==============================  ===============================
    dim   meaning                     unit                            clipped to
    ====  ==========================  ==============================  ===============================
    0-2   dx, dy, dz: effector move   metres per step, table frame    +-MAX_XY_STEP, +-MAX_XY_STEP,
                                                                      +-MAX_Z_STEP
    3-5   droll, dpitch, dyaw         radians per step                +-MAX_ROT_STEP; accepted and
                                                                      ignored by the dynamics
    6     gripper                     1 = open, 0 = close             [0, 1]; >= GRIPPER_THRESHOLD
                                                                      is open
    ====  ==========================  ==============================  ===============================

After the move the effector is clamped to the workspace (``WORKSPACE_XY``, ``WORKSPACE_Z``).
"""

from __future__ import annotations

import numpy as np

TASK_VERSION = "2"  # 2: the expert moves on a 5 mm grid (prismatic_tr.envs.expert); bump when the rendering, dynamics or expert change (datasets record it)

# Camera: image of IMAGE_SIZE x IMAGE_SIZE pixels, RGB uint8, centred on the effector.
IMAGE_SIZE = 224
VIEW_HALF_AT_TABLE = 0.30          # half the table width the image spans with the effector at z = 0, metres
VIEW_HALF_PER_M = 1.0              # ... plus this much per metre of height (0.42 m at the top of the workspace)
TABLE_HALF = 0.30                  # the table is [-TABLE_HALF, TABLE_HALF]^2; the floor beyond it

# The second, fixed camera (OpenVLA-OFT's third-person view; off unless asked for): the whole table from straight
# above, IMAGE_SIZE pixels over [-TABLE_HALF, TABLE_HALF]^2, the effector drawn as a ring that grows with its
# height (THIRD_PERSON_RING_PX + THIRD_PERSON_RING_PER_M * z pixels) around a dot, filled when the gripper is closed.
THIRD_PERSON_RING_PX = 7.0
THIRD_PERSON_RING_PER_M = 90.0

# Proprio (OpenVLA-OFT's robot state): effector x, y, z in metres and the gripper (1 open, 0 closed), float32.
PROPRIO_DIM = 4

# Workspace of the effector (grasp point between the gripper's fingers), metres.
WORKSPACE_XY = 0.19                # x and y in [-WORKSPACE_XY, WORKSPACE_XY]
WORKSPACE_Z = (0.0, 0.12)          # z range
START_Z = (0.05, 0.12)             # start height, uniform
MIN_START_DISTANCE = 0.08          # the effector starts at least this far (in x-y) from the target

# Objects: flat shapes on the table, centres in [-OBJECT_XY, OBJECT_XY]^2.
OBJECT_XY = 0.17
OBJECT_RADIUS = 0.0325             # nominal radius (about 24 px across with the effector on the table)
MIN_OBJECT_SPACING = 0.10          # minimum distance between object centres (no overlaps, disjoint grasp zones)

# Success: a grasp is a close command (gripper < GRIPPER_THRESHOLD) issued while the gripper is open; it
# takes the object whose grasp zone holds the effector after the step's move: x-y distance to the object's
# centre <= GRASP_RADIUS and z <= GRASP_HEIGHT. "reach" tasks succeed on entering the target's zone.
GRASP_RADIUS = 0.03
GRASP_HEIGHT = 0.04

# Actions.
ACTION_DIM = 7
MAX_XY_STEP = 0.025                # metres per step
MAX_Z_STEP = 0.025                 # metres per step
MAX_ROT_STEP = 0.25                # radians per step (ignored by the dynamics)
GRIPPER_THRESHOLD = 0.5
GRIPPER_OPEN, GRIPPER_CLOSE = 1.0, 0.0
ACTION_LOW = np.array([-MAX_XY_STEP, -MAX_XY_STEP, -MAX_Z_STEP] + [-MAX_ROT_STEP] * 3 + [0.0], dtype=np.float64)
ACTION_HIGH = np.array([MAX_XY_STEP, MAX_XY_STEP, MAX_Z_STEP] + [MAX_ROT_STEP] * 3 + [1.0], dtype=np.float64)

DEFAULT_MAX_STEPS = 40             # step limit of an episode (the expert needs <= 20)

# Vocabulary. Colours are strongly distinct saturated hues; the table is kept to muted, unsaturated tones.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "green": (35, 165, 60),
    "blue": (35, 85, 215),
    "yellow": (235, 200, 30),
    "purple": (140, 55, 190),
}
SHAPES = ("block", "circle", "triangle", "star", "cross")

# Task kinds and the instruction each one gets ("{}" is the target's name, e.g. "red block").
INSTRUCTION_TEMPLATES: dict[str, str] = {
    "pick": "pick up the {}",
    "reach": "move to the {}",
}
TASK_KINDS = tuple(INSTRUCTION_TEMPLATES)


def view_half_width(z: float) -> float:
    """Half the width of table the image spans with the effector at height ``z``, metres."""
    return VIEW_HALF_AT_TABLE + VIEW_HALF_PER_M * z


def to_pixels(x: float, y: float, effector: tuple[float, float, float]) -> tuple[float, float]:
    """Image (u, v) in pixels where the table point (x, y) is seen with the effector (camera) at ``effector``."""
    ex, ey, ez = effector
    ppm = (IMAGE_SIZE / 2) / view_half_width(ez)
    return IMAGE_SIZE / 2 + ppm * (x - ex), IMAGE_SIZE / 2 - ppm * (y - ey)


def clip_action(action: np.ndarray) -> np.ndarray:
    """(7,) action -> float64 (7,) clipped to [ACTION_LOW, ACTION_HIGH]."""
    return np.clip(np.asarray(action, dtype=np.float64), ACTION_LOW, ACTION_HIGH)
