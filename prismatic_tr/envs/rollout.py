"""Running a policy in an episode: ``rollout(env, policy_fn)`` -> :class:`EpisodeResult`.

    from prismatic_tr.envs import ScriptedExpert, make_episode, rollout
    env = make_episode(seed=7)
    result = rollout(env, ScriptedExpert().policy(env))      # result.success, result.steps, result.outcome

``policy_fn(image, instruction)`` gets the (224, 224, 3) uint8 image and the instruction string and returns a
7-D action (see ``prismatic_tr.envs.spec``). ``perturb`` changes the action that is executed while the policy's
own action is the one recorded (noise injection for demonstrations, see :class:`ExecutionNoise`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from prismatic_tr.envs.env import RUNNING, SUCCESS, TIMEOUT, EnvState, TabletopEnv
from prismatic_tr.envs.expert import PolicyFn
from prismatic_tr.envs.spec import GRASP_HEIGHT, GRIPPER_CLOSE, GRIPPER_THRESHOLD, MAX_XY_STEP, MAX_Z_STEP

# perturb(policy action (7,), state before the step) -> action to execute (7,)
Perturb = Callable[[np.ndarray, EnvState], np.ndarray]


@dataclass
class EpisodeResult:
    """One episode's outcome; with ``record`` also its steps (the observation image before each action, the
    policy's action as float32 (7,), the state that image shows; and the third-person image of the same moment when
    the episode was made with ``third_person=True``) and the image after the last step."""

    seed: int
    instruction: str
    kind: str           # task kind ("pick" / "reach")
    target: str         # the target's name ("red block")
    outcome: str
    steps: int
    images: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    states: list[EnvState | np.ndarray] = field(default_factory=list)  # (4,) float32 arrays in MetaWorld episodes
    final_image: np.ndarray | None = None  # the image after the last step (recorded only)
    third_person_images: list[np.ndarray] = field(default_factory=list)  # recorded, third-person episodes only
    action_chunks: list[np.ndarray] = field(default_factory=list)  # (chunk, 7) labels per step (OFT relabelling)

    @property
    def success(self) -> bool:
        return self.outcome == SUCCESS


def rollout(
    env: TabletopEnv,
    policy_fn: PolicyFn,
    max_steps: int | None = None,
    record: bool = False,
    perturb: Perturb | None = None,
) -> EpisodeResult:
    """Reset ``env`` and run ``policy_fn`` until the episode ends or ``max_steps`` steps (default: the
    env's own limit; a smaller one ends the episode early as "timeout")."""
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"max_steps={max_steps!r} is not allowed; use None or an integer >= 1")
    obs = env.reset()
    result = EpisodeResult(env.seed, env.instruction, env.scene.kind, env.scene.target_object.name, RUNNING, 0)
    while not env.state.done and (max_steps is None or env.state.steps < max_steps):
        action = np.asarray(policy_fn(obs.image, obs.instruction), dtype=np.float32)
        if record:
            result.images.append(obs.image)
            result.actions.append(action)
            result.states.append(env.state)
            if obs.third_person is not None:
                result.third_person_images.append(obs.third_person)
        executed = perturb(action, env.state) if perturb is not None else action
        obs = env.step(executed).observation
    result.outcome = env.state.outcome if env.state.done else TIMEOUT
    if record:
        result.final_image = obs.image
    result.steps = env.state.steps
    return result


class ExecutionNoise:
    """Noise injection for demonstrations (DART-style): the executed action is the policy's plus Gaussian
    motion noise, and an open gripper is sometimes closed where nothing can be grasped; the recorded label
    stays the policy's, so the data show how to recover from states the noise-free expert never visits.

    Args:
        motion_noise: noise std as a fraction of the step limits (MAX_XY_STEP for dx, dy; MAX_Z_STEP for dz).
        gripper_noise: chance per step of closing an open gripper while it is so high (above GRASP_HEIGHT +
            MAX_Z_STEP) that it cannot grasp anything this step; the image then shows a closed gripper until
            the policy opens it again.
        seed: the episode's seed; the noise stream is independent of the scene's (same seed, other stream).
    """

    STREAM = 0x6E6F6973  # separates the noise stream from the scene stream of the same seed

    def __init__(self, motion_noise: float = 0.0, gripper_noise: float = 0.0, seed: int = 0) -> None:
        for name, value in (("motion_noise", motion_noise), ("gripper_noise", gripper_noise)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value} is not allowed; use a number in [0, 1]")
        self.gripper_noise = gripper_noise
        self.rng = np.random.default_rng([self.STREAM, seed])
        self.scale = np.array([MAX_XY_STEP, MAX_XY_STEP, MAX_Z_STEP]) * motion_noise

    def __call__(self, action: np.ndarray, state: EnvState) -> np.ndarray:
        out = np.array(action, dtype=np.float64)
        out[:3] += self.rng.normal(size=3) * self.scale
        flip = self.rng.random() < self.gripper_noise
        if flip and state.effector[2] > GRASP_HEIGHT + MAX_Z_STEP and out[6] >= GRIPPER_THRESHOLD:
            out[6] = GRIPPER_CLOSE
        return out
