"""The tabletop task: an episode per seed, 7-D actions, a 224 x 224 camera image per step.

    env = make_episode(seed=3)                # or TabletopEnv(seed=3, config=TaskConfig(...))
    obs = env.reset()                         # Observation(image (224, 224, 3) uint8, instruction str, proprio)
    env = make_episode(seed=3, third_person=True)  # ... and obs.third_person: the fixed overhead camera
    obs, reward, done, info = env.step(action)  # action (7,): see prismatic_tr.envs.spec for units / clipping

Dynamics of one step: the action is clipped (``spec.clip_action``), the effector moves by (dx, dy, dz) and
is clamped to the workspace, then the gripper takes the commanded state. Closing an open gripper inside an
object's grasp zone (``spec.GRASP_RADIUS``, ``spec.GRASP_HEIGHT``) grasps it: the target is a success, any
other object a failure (``"wrong_object"``); closing elsewhere grasps nothing and the episode goes on. A
"reach" episode succeeds as soon as the effector is inside the target's zone. The episode ends on success,
failure, or after ``config.max_steps`` steps (``"timeout"``). Rotation is accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from prismatic_tr.envs.render import Renderer
from prismatic_tr.envs.scene import Scene, SceneObject, TaskConfig, sample_scene
from prismatic_tr.envs.spec import (
    ACTION_DIM,
    GRASP_HEIGHT,
    GRASP_RADIUS,
    GRIPPER_THRESHOLD,
    WORKSPACE_XY,
    WORKSPACE_Z,
    clip_action,
)

RUNNING, SUCCESS, WRONG_OBJECT, TIMEOUT = "running", "success", "wrong_object", "timeout"


@dataclass(frozen=True)
class EnvState:
    """Everything the dynamics use (all of it drawn in the image, the task kind aside: it is in the
    instruction). ``effector`` is the grasp point (x, y, z) in metres."""

    scene: Scene
    effector: tuple[float, float, float]
    gripper_open: bool
    steps: int
    outcome: str
    grasped: str | None = None  # name of the object grasped, if any

    @property
    def done(self) -> bool:
        return self.outcome != RUNNING

    @property
    def success(self) -> bool:
        return self.outcome == SUCCESS


@dataclass(frozen=True)
class Observation:
    """What a policy sees: ``image`` (224, 224, 3) uint8 RGB from the camera on the gripper and the
    ``instruction`` text; for OpenVLA-OFT-style policies also ``proprio`` ((PROPRIO_DIM,) float32: effector x, y, z
    in metres, gripper 1 open / 0 closed) and, when the episode was made with ``third_person=True``,
    ``third_person`` (224, 224, 3) uint8 from the fixed overhead camera (else None)."""

    image: np.ndarray
    instruction: str
    proprio: np.ndarray | None = None
    third_person: np.ndarray | None = None


@dataclass(frozen=True)
class StepInfo:
    """Details of a step: ``action`` is the (7,) float64 action actually applied (after clipping)."""

    success: bool
    outcome: str
    grasped: str | None
    steps: int
    action: np.ndarray


class StepResult(NamedTuple):
    """``env.step`` result; unpacks as ``obs, reward, done, info``. reward is 1.0 on success, else 0.0."""

    observation: Observation
    reward: float
    done: bool
    info: StepInfo


def in_grasp_zone(effector: tuple[float, float, float], obj: SceneObject) -> bool:
    """Whether the effector is within GRASP_RADIUS (x-y) of ``obj``'s centre and at most GRASP_HEIGHT high."""
    x, y, z = effector
    return bool(np.hypot(x - obj.x, y - obj.y) <= GRASP_RADIUS and z <= GRASP_HEIGHT)


def check_action(action: object) -> np.ndarray:
    """``action`` as a clipped float64 (7,) array; ValueError for another shape or non-finite values."""
    arr = np.asarray(action, dtype=np.float64)
    if arr.shape != (ACTION_DIM,):
        raise ValueError(f"action has shape {arr.shape}; expected ({ACTION_DIM},): dx, dy, dz, droll, dpitch, dyaw, gripper")
    if not np.isfinite(arr).all():
        raise ValueError(f"action {arr.tolist()} has non-finite values")
    return clip_action(arr)


class TabletopEnv:
    """One episode of the task, fully determined by ``seed`` and ``config`` (see the module docstring)."""

    def __init__(self, seed: int = 0, config: TaskConfig | None = None, third_person: bool = False) -> None:
        if config is not None and not isinstance(config, TaskConfig):
            raise ValueError(f"config={config!r} is not allowed; pass a TaskConfig or None")
        if not isinstance(third_person, bool):
            raise ValueError(f"third_person={third_person!r} is not allowed; pass True or False")
        self.config = config or TaskConfig()
        self.third_person = third_person
        self.scene = sample_scene(seed, self.config)
        self.seed = self.scene.seed
        self._renderer = Renderer(self.scene)
        self._state = self._initial_state()

    def _initial_state(self) -> EnvState:
        return EnvState(self.scene, self.scene.start, gripper_open=True, steps=0, outcome=RUNNING)

    @property
    def state(self) -> EnvState:
        """The current state (immutable snapshot)."""
        return self._state

    @property
    def instruction(self) -> str:
        return self.scene.instruction

    @property
    def kind(self) -> str:
        """The task kind ("pick" / "reach"), as a recorded episode's ``kind``."""
        return self.scene.kind

    @property
    def target(self) -> str:
        """The target object's name ("red block"), as a recorded episode's ``target``."""
        return self.scene.target_object.name

    def render(self) -> np.ndarray:
        """The current camera image, (224, 224, 3) uint8."""
        return self._renderer.render(self._state.effector, self._state.gripper_open)

    def proprio(self) -> np.ndarray:
        """(PROPRIO_DIM,) float32: effector x, y, z (metres), gripper (1 open, 0 closed)."""
        return np.array([*self._state.effector, float(self._state.gripper_open)], dtype=np.float32)

    def render_third_person(self) -> np.ndarray:
        """The fixed overhead camera's image now, (224, 224, 3) uint8."""
        return self._renderer.render_third_person(self._state.effector, self._state.gripper_open)

    def observe(self) -> Observation:
        third = self.render_third_person() if self.third_person else None
        return Observation(self.render(), self.instruction, self.proprio(), third)

    def reset(self) -> Observation:
        """Back to the episode's start (the same every time); returns the first observation."""
        self._state = self._initial_state()
        return self.observe()

    def _zone_object(self, effector: tuple[float, float, float]) -> int | None:
        """Index of the object whose grasp zone holds ``effector`` (zones are disjoint), or None."""
        return next((i for i, o in enumerate(self.scene.objects) if in_grasp_zone(effector, o)), None)

    def step(self, action: object) -> StepResult:
        """Apply one 7-D action; RuntimeError once the episode is done (call ``reset``)."""
        if self._state.done:
            raise RuntimeError(f"episode {self.seed} is over ({self._state.outcome}); call reset()")
        act = check_action(action)
        x, y, z = np.asarray(self._state.effector) + act[:3]
        effector = (
            float(np.clip(x, -WORKSPACE_XY, WORKSPACE_XY)),
            float(np.clip(y, -WORKSPACE_XY, WORKSPACE_XY)),
            float(np.clip(z, *WORKSPACE_Z)),
        )
        opens = bool(act[6] >= GRIPPER_THRESHOLD)
        zone, target = self._zone_object(effector), self.scene.target
        outcome, grasped = RUNNING, None
        if self.scene.kind == "reach" and zone == target:
            outcome = SUCCESS
        elif not opens and self._state.gripper_open and zone is not None:
            grasped = self.scene.objects[zone].name
            outcome = SUCCESS if zone == target else WRONG_OBJECT
        steps = self._state.steps + 1
        if outcome == RUNNING and steps >= self.config.max_steps:
            outcome = TIMEOUT
        self._state = EnvState(self.scene, effector, opens, steps, outcome, grasped)
        info = StepInfo(outcome == SUCCESS, outcome, grasped, steps, act)
        return StepResult(self.observe(), float(outcome == SUCCESS), outcome != RUNNING, info)


def make_episode(seed: int, config: TaskConfig | None = None, third_person: bool = False) -> TabletopEnv:
    """The episode ``seed`` of the task (a new :class:`TabletopEnv`, at its start); ``third_person``: observations
    also carry the fixed overhead camera's image (OpenVLA-OFT's second view)."""
    return TabletopEnv(seed=seed, config=config, third_person=third_person)
