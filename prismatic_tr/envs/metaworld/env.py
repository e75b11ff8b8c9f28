"""A MetaWorld v3 task as an OpenVLA / OpenVLA-OFT environment: 7-D actions, two cameras, a 7-D state.

    from prismatic_tr.envs.metaworld import MetaWorldEnv
    env = MetaWorldEnv("pick-place-v3", image_size=224)
    obs = env.reset(seed=3_000_000)        # obs.image, obs.wrist_image (224, 224, 3) uint8, obs.state (7,), obs.instruction
    step = env.step(action)                # action (7,): actions.py; step.observation, .reward, .done, .info
    env.close()

metaworld (and mujoco) are imported on first use, with ``MUJOCO_GL=osmesa`` and ``PYOPENGL_PLATFORM=osmesa`` set
when unset and mujoco is not imported yet (offscreen rendering on a CPU; needs ``apt-get install libosmesa6``).
mujoco with OSMesa and tensorflow cannot share a process: importing either after the other is a segmentation fault
(each loads its own LLVM), so make environments in processes that never import tensorflow (the RLDS writer runs
the experts in a child process).
Cameras, the flip and the state's fields: :mod:`prismatic_tr.envs.metaworld.tasks`.

Seeds: ``reset(seed)`` seeds the environment (``env.seed(seed)``: MetaWorld's ``np_random``) and resets it with
``seeded_rand_vec`` on and the random vector unfrozen, so MetaWorld draws the object and goal positions (its
``_last_rand_vec``, inside the task's ``_random_reset_space``, redrawn by MetaWorld until e.g. puck and goal are
apart) from that seed alone: the same (task, seed) always gives the same scene, whatever ran before. The goal is
observable (``_partially_observable`` off: ``obs[-3:]`` is the goal, which the scripted experts read) and, for
reach / push / pick-place, drawn as a small sphere. This is what MetaWorld's own goal-observable environments
(``metaworld.env_dict.ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE``) set, plus the seeded draw.

An episode ends at MetaWorld's first ``info["success"]`` or after the task's ``max_steps`` (outcome "timeout").
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from prismatic_tr.envs.env import RUNNING, SUCCESS, TIMEOUT
from prismatic_tr.envs.metaworld.actions import ACTION_SCALE, from_metaworld, to_metaworld
from prismatic_tr.envs.metaworld.tasks import (
    DEFAULT_IMAGE_SIZE,
    METAWORLD_MAX_PATH_LENGTH,
    RENDER_SHADOWS,
    THIRD_PERSON_CAMERA,
    WRIST_CAMERA,
    MetaWorldTask,
    check_image_size,
    metaworld_task,
    state_of,
)

INSTALL_HINT = ("the MetaWorld adapter needs metaworld: pip install 'prismatic_tr[metaworld]' (bash "
                "scripts/setup_env.sh with METAWORLD=1), and to render on a CPU: apt-get install libosmesa6")
# MetaWorld attributes this adapter sets (as metaworld.env_dict's goal-observable environments do); checked, so a
# MetaWorld release that renames them fails here and not with silently unseeded goals
_SEEDING_ATTRIBUTES = ("_partially_observable", "_freeze_rand_vec", "seeded_rand_vec", "_set_task_called",
                       "_last_rand_vec")


def import_mujoco() -> ModuleType:
    """``mujoco``, imported after defaulting ``MUJOCO_GL`` / ``PYOPENGL_PLATFORM`` to osmesa (if not yet imported)."""
    if "mujoco" not in sys.modules:
        gl = os.environ.setdefault("MUJOCO_GL", "osmesa")
        if gl in ("osmesa", "egl"):
            os.environ.setdefault("PYOPENGL_PLATFORM", gl)
        if gl == "osmesa" and "tensorflow" in sys.modules:
            raise RuntimeError("tensorflow is imported in this process, and mujoco with OSMesa would crash it "
                               "(both load an LLVM; segmentation fault): run MetaWorld in another process, as "
                               "prismatic_tr.envs.metaworld.demos.expert_stream does")
    try:
        import mujoco
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return mujoco


def environment_class(task: str) -> type:
    """MetaWorld's environment class of ``task`` (metaworld.env_dict.ALL_V3_ENVIRONMENTS)."""
    metaworld_task(task)
    import_mujoco()
    try:
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return ALL_V3_ENVIRONMENTS[task]


def make_seeded(task: str) -> Any:
    """A MetaWorld environment of ``task`` whose ``reset`` draws a goal from ``env.seed(...)`` (module docstring)."""
    env = environment_class(task)()
    missing = [a for a in _SEEDING_ATTRIBUTES if not hasattr(env, a)]
    if missing:
        raise RuntimeError(f"this MetaWorld release lacks {missing} on {type(env).__name__}; the adapter was "
                           "written for metaworld 3.1 (seeded, goal-observable resets)")
    if not np.isclose(env.action_scale, ACTION_SCALE):
        raise RuntimeError(f"{task}: MetaWorld's action_scale is {env.action_scale}, the adapter maps actions with "
                           f"{ACTION_SCALE} (prismatic_tr.envs.metaworld.actions)")
    env._partially_observable = False
    env.__dict__.pop("sawyer_observation_space", None)   # a cached_property: recomputed with the goal's bounds
    env._freeze_rand_vec, env.seeded_rand_vec, env._set_task_called = False, True, True
    return env


def reset_seeded(env: Any, seed: int) -> np.ndarray:
    """Reset a :func:`make_seeded` environment to episode ``seed``; MetaWorld's (39,) observation."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed {seed!r} is not allowed; use an integer >= 0")
    env.seed(int(seed))
    obs, _ = env.reset()
    return obs


def goal_vectors(task: str, seeds: Iterable[int]) -> np.ndarray:
    """(len(seeds), d) float64: the object / goal vector MetaWorld draws for each seed of ``task`` (no rendering)."""
    env = make_seeded(task)
    try:
        rows = []
        for seed in seeds:
            reset_seeded(env, seed)
            rows.append(np.array(env._last_rand_vec, dtype=np.float64))
        return np.stack(rows)
    finally:
        env.close()


def make_renderer(env: Any, image_size: int, shadows: bool = RENDER_SHADOWS) -> Any:
    """A ``mujoco.Renderer`` of ``image_size`` x ``image_size`` for ``env``'s model: reflections off, shadows as asked."""
    mujoco = import_mujoco()
    renderer = mujoco.Renderer(env.model, image_size, image_size)
    renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = bool(shadows)
    renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
    return renderer


@dataclass(frozen=True)
class MetaWorldObservation:
    """What a policy sees: ``image`` (third-person ``corner3``) and ``wrist_image`` (``gripperPOV``), each (S, S, 3)
    uint8 (None when rendering is off or on demand), ``state`` (7,) float32 (effector xyz in metres, gripper opening
    1 open / 0 closed, the goal's xyz: :data:`~prismatic_tr.envs.metaworld.tasks.STATE_FIELDS`), the ``instruction``; ``raw`` is MetaWorld's (39,) float64 observation (what the scripted experts read)."""

    image: np.ndarray | None
    wrist_image: np.ndarray | None
    state: np.ndarray
    instruction: str
    raw: np.ndarray


@dataclass(frozen=True)
class MetaWorldStep:
    """One step: the observation after it, MetaWorld's reward, whether the episode ended, and ``info``
    {"success": bool, "outcome": "running" / "success" / "timeout", "steps": int, "action": (4,) MetaWorld action
    applied}."""

    observation: MetaWorldObservation
    reward: float
    done: bool
    info: dict[str, Any]


class MetaWorldEnv:
    """One MetaWorld task; ``reset(seed)`` starts episode ``seed``, ``step(action7)`` acts (module docstring).

    Args:
        task: a task of :data:`prismatic_tr.envs.metaworld.tasks.TASKS` (MT10, "-v3" names).
        image_size: frames are ``image_size`` x ``image_size`` (rendered at that size).
        render: False for state-only episodes (no frames; an expert needs none).
        max_steps: the episode cap (default: the task's).
        shadows: render shadows (6x slower on a CPU; reflections are always off: tasks.py).
        on_demand: with ``render``, observations carry no frames; :meth:`render` draws the current state when asked
            (a policy that runs a chunk open loop reads one observation in ``chunk``: the rest are never drawn).
    """

    def __init__(self, task: str, image_size: int = DEFAULT_IMAGE_SIZE, render: bool = True,
                 max_steps: int | None = None, shadows: bool = RENDER_SHADOWS, on_demand: bool = False) -> None:
        self.task: MetaWorldTask = metaworld_task(task)
        self.image_size = check_image_size(image_size)
        self.max_steps = self.task.max_steps if max_steps is None else max_steps
        cap = METAWORLD_MAX_PATH_LENGTH
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or not 1 <= self.max_steps <= cap:
            raise ValueError(f"max_steps={max_steps!r} is not allowed; use None or an integer from 1 to {cap}")
        self.env = make_seeded(task)
        self._renderer = make_renderer(self.env, image_size, shadows) if render else None
        self.on_demand = bool(on_demand and render)
        self.seed: int | None = None
        self.steps, self.outcome = 0, RUNNING
        self._raw: np.ndarray | None = None

    @property
    def instruction(self) -> str:
        return self.task.instruction

    @property
    def done(self) -> bool:
        return self.outcome != RUNNING

    @property
    def goal_vector(self) -> np.ndarray:
        """The episode's object / goal vector (MetaWorld's ``_last_rand_vec``)."""
        return np.array(self.env._last_rand_vec, dtype=np.float64)

    @property
    def target(self) -> str:
        """The goal vector as text, a recorded episode's ``target``."""
        return "goal vector " + " ".join(f"{v:.4f}" for v in self.goal_vector)

    @property
    def state(self) -> np.ndarray:
        """(7,) float32: the current state (:func:`state_of`), as the observation's."""
        if self._raw is None:
            raise RuntimeError("call reset(seed) first")
        return state_of(self._raw)

    def render(self, camera: str) -> np.ndarray:
        """(S, S, 3) uint8 frame of ``camera``, flipped upright (MetaWorld's cameras are defined upside down)."""
        if self._renderer is None:
            raise RuntimeError("this MetaWorldEnv was made with render=False")
        self._renderer.update_scene(self.env.data, camera=camera)
        return np.ascontiguousarray(self._renderer.render()[::-1])

    def observation(self) -> MetaWorldObservation:
        raw = self._raw
        if raw is None:
            raise RuntimeError("call reset(seed) first")
        state = state_of(raw)
        drawn = self._renderer is not None and not self.on_demand
        frames = (self.render(THIRD_PERSON_CAMERA), self.render(WRIST_CAMERA)) if drawn else (None, None)
        return MetaWorldObservation(frames[0], frames[1], state, self.instruction, raw.copy())

    def reset(self, seed: int) -> MetaWorldObservation:
        self._raw = reset_seeded(self.env, seed)
        self.seed, self.steps, self.outcome = int(seed), 0, RUNNING
        return self.observation()

    def step(self, action: np.ndarray) -> MetaWorldStep:
        """Apply the 7-D ``action`` (mapped by :func:`to_metaworld`); RuntimeError once the episode is over."""
        if self._raw is None or self.done:
            raise RuntimeError("the episode is over (or never started); call reset(seed)")
        applied = to_metaworld(action)
        raw, reward, _, _, info = self.env.step(applied)
        self._raw, self.steps = raw, self.steps + 1
        success = bool(info["success"])
        if success:
            self.outcome = SUCCESS
        elif self.steps >= self.max_steps:
            self.outcome = TIMEOUT
        info = {"success": success, "outcome": self.outcome, "steps": self.steps, "action": applied}
        return MetaWorldStep(self.observation(), float(reward), self.done, info)

    def close(self) -> None:
        """Free the renderer's GL context and the simulation (a closed env cannot be used again)."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.env.close()

    def __enter__(self) -> MetaWorldEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# policy_fn(observation) -> (7,) action
MetaWorldPolicyFn = Callable[[MetaWorldObservation], np.ndarray]


def scripted_expert(task: str) -> MetaWorldPolicyFn:
    """MetaWorld's scripted expert of ``task`` (metaworld.policies) as a policy fn: it reads the raw state
    observation (never the images), its action is clipped to MetaWorld's [-1, 1] (what the env would apply) and
    mapped to 7-D (:func:`from_metaworld`)."""
    metaworld_task(task)
    import_mujoco()
    from metaworld.policies import ENV_POLICY_MAP

    policy = ENV_POLICY_MAP[task]()

    def policy_fn(obs: MetaWorldObservation) -> np.ndarray:
        with warnings.catch_warnings():  # metaworld.policies.move warns whenever it saturates ("Constant(s) ...")
            warnings.simplefilter("ignore", UserWarning)
            return from_metaworld(policy.get_action(obs.raw))

    return policy_fn
