"""What an episode looks like, drawn from its seed: objects, target, instruction, start, table and light.

:func:`sample_scene` is a pure function of ``(seed, config)``: the same pair always gives the same
:class:`Scene`, and the renderer and the dynamics read everything they need from it.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

import numpy as np

from prismatic_tr.envs.spec import (
    COLORS,
    DEFAULT_MAX_STEPS,
    INSTRUCTION_TEMPLATES,
    MIN_OBJECT_SPACING,
    MIN_START_DISTANCE,
    OBJECT_XY,
    SHAPES,
    START_Z,
    TASK_KINDS,
    WORKSPACE_XY,
)

MAX_OBJECTS = 6  # more do not fit reliably at MIN_OBJECT_SPACING
TABLE_PATTERNS = ("wood", "tiles", "speckle")
_MAX_TRIES = 10_000


@dataclass(frozen=True)
class TaskConfig:
    """The distribution episodes are drawn from (the same config and seed give the same episode).

    Args:
        min_objects, max_objects: objects on the table, uniform in [min, max] (1 to 6).
        kinds: task kinds to draw from ("pick": reach and grasp the target; "reach": move the open
            gripper into the target's grasp zone).
        max_steps: step limit of an episode.
        distinct_attributes: every object of a scene has its own colour and its own shape (at most 5
            objects); False only keeps names ("red block") unique, so colour alone may not identify it.
    """

    min_objects: int = 3
    max_objects: int = 5
    kinds: tuple[str, ...] = TASK_KINDS
    max_steps: int = DEFAULT_MAX_STEPS
    distinct_attributes: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(self.kinds))
        limit = min(len(COLORS), len(SHAPES), MAX_OBJECTS) if self.distinct_attributes else MAX_OBJECTS
        if not 1 <= self.min_objects <= self.max_objects <= limit:
            raise ValueError(f"min_objects={self.min_objects}, max_objects={self.max_objects}: need "
                             f"1 <= min_objects <= max_objects <= {limit}")
        bad = [k for k in self.kinds if k not in TASK_KINDS]
        if bad or not self.kinds or len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"kinds={list(self.kinds)} is not allowed; give distinct names from {list(TASK_KINDS)}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps={self.max_steps} must be >= 1")


@dataclass(frozen=True)
class SceneObject:
    """One object: its name parts, centre (x, y) in metres, drawn rotation (radians) and drawn colour."""

    color: str
    shape: str
    x: float
    y: float
    angle: float
    rgb: tuple[int, int, int]

    @property
    def name(self) -> str:
        return f"{self.color} {self.shape}"


@dataclass(frozen=True)
class TableLook:
    """Table texture and lighting: the texture is rebuilt from ``texture_seed``; the light is a linear
    brightness gradient across the image times a global brightness and per-channel gains."""

    pattern: str
    rgb: tuple[int, int, int]
    texture_seed: int
    light_direction: float
    light_strength: float
    brightness: float
    channel_gain: tuple[float, float, float]


@dataclass(frozen=True)
class Scene:
    """One episode's fixed content. ``start`` is the effector's (x, y, z) in metres, gripper open."""

    seed: int
    objects: tuple[SceneObject, ...]
    target: int
    kind: str
    start: tuple[float, float, float]
    look: TableLook

    @property
    def target_object(self) -> SceneObject:
        return self.objects[self.target]

    @property
    def instruction(self) -> str:
        return INSTRUCTION_TEMPLATES[self.kind].format(self.target_object.name)


def check_seed(seed: object) -> int:
    """``seed`` as an int; ValueError unless it is a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={seed!r} is not allowed; use an integer >= 0")
    return int(seed)


def _names(rng: np.random.Generator, n: int, distinct: bool) -> list[tuple[str, str]]:
    colors, shapes = list(COLORS), list(SHAPES)
    if distinct:
        return list(zip(rng.permutation(colors)[:n], rng.permutation(shapes)[:n], strict=True))
    pairs = [(c, s) for c in colors for s in shapes]
    return [pairs[i] for i in rng.choice(len(pairs), size=n, replace=False)]


def _positions(rng: np.random.Generator, n: int) -> list[tuple[float, float]]:
    """``n`` object centres, pairwise at least MIN_OBJECT_SPACING apart (rejection sampling)."""
    out: list[tuple[float, float]] = []
    for _ in range(_MAX_TRIES):
        p = rng.uniform(-OBJECT_XY, OBJECT_XY, size=2)
        if all(np.hypot(p[0] - q[0], p[1] - q[1]) >= MIN_OBJECT_SPACING for q in out):
            out.append((float(p[0]), float(p[1])))
            if len(out) == n:
                return out
    raise RuntimeError(f"could not place {n} objects {MIN_OBJECT_SPACING} m apart")  # cannot happen for n <= 6


def _object_rgb(rng: np.random.Generator, color: str) -> tuple[int, int, int]:
    base = np.asarray(COLORS[color], dtype=np.float64)
    rgb = base * rng.uniform(0.88, 1.06) + rng.uniform(-12, 12, size=3)
    return tuple(int(v) for v in np.clip(rgb, 0, 255))


def _table_look(rng: np.random.Generator) -> TableLook:
    """Muted wood / grey tones (saturation <= 0.4) so that the objects' saturated colours stand out."""
    pattern = TABLE_PATTERNS[int(rng.integers(len(TABLE_PATTERNS)))]
    if rng.random() < 0.3:  # grey
        hue, sat = 0.0, rng.uniform(0.0, 0.06)
    else:  # wood
        hue, sat = rng.uniform(0.05, 0.12), rng.uniform(0.15, 0.4)
    rgb = tuple(int(255 * c) for c in colorsys.hsv_to_rgb(hue, sat, rng.uniform(0.45, 0.75)))
    return TableLook(
        pattern=pattern,
        rgb=rgb,
        texture_seed=int(rng.integers(2**31)),
        light_direction=float(rng.uniform(0, 2 * np.pi)),
        light_strength=float(rng.uniform(0.0, 0.12)),
        brightness=float(rng.uniform(0.92, 1.08)),
        channel_gain=tuple(float(g) for g in rng.uniform(0.96, 1.04, size=3)),
    )


def _start(rng: np.random.Generator, target: SceneObject) -> tuple[float, float, float]:
    for _ in range(_MAX_TRIES):
        x, y = rng.uniform(-WORKSPACE_XY, WORKSPACE_XY, size=2)
        if np.hypot(x - target.x, y - target.y) >= MIN_START_DISTANCE:
            return float(x), float(y), float(rng.uniform(*START_Z))
    raise RuntimeError("could not place the effector's start")  # cannot happen


def sample_scene(seed: int, config: TaskConfig | None = None) -> Scene:
    """The scene of episode ``seed`` under ``config`` (default :class:`TaskConfig`)."""
    seed, config = check_seed(seed), config or TaskConfig()
    rng = np.random.default_rng(seed)
    n = int(rng.integers(config.min_objects, config.max_objects + 1))
    names = _names(rng, n, config.distinct_attributes)
    positions = _positions(rng, n)
    objects = tuple(
        SceneObject(str(c), str(s), x, y, 0.0 if s == "circle" else float(rng.uniform(-0.35, 0.35)), _object_rgb(rng, c))
        for (c, s), (x, y) in zip(names, positions, strict=True)
    )
    target = int(rng.integers(n))
    kind = config.kinds[int(rng.integers(len(config.kinds)))]
    start = _start(rng, objects[target])
    return Scene(seed, objects, target, kind, start, _table_look(rng))
