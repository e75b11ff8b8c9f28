"""One MetaWorld episode behind the tabletop task's episode interface, for the closed loop of ``prismatic_tr.policy``.

    from prismatic_tr.envs.metaworld.episode import MetaWorldEpisode
    env = MetaWorldEpisode("pick-place-v3", seed=3_000_000)
    obs = env.reset()                         # obs.third_person (corner3), obs.image (gripperPOV), obs.proprio (7,)
    obs, reward, done, info = env.step(a)     # a (7,); info.outcome "running" / "success" / "timeout", info.steps
    env.close()

What :func:`prismatic_tr.policy.closed_loop.run_episodes` reads of a tabletop episode (``make_episode(seed,
third_person=True)``), with the same meanings: ``image`` the eye-in-hand camera, ``third_person`` the fixed one,
``proprio`` the (7,) state, ``seed``, ``instruction``. Frames are drawn on demand: an observation renders its two
cameras the first time one is read, and only while it is the episode's current observation (reading an older one
is a ``RuntimeError``, never a frame of the wrong state). A policy that runs a chunk of 8 actions open loop reads
one observation in 8, so the other 7 are never drawn (MetaWorld's rendering, not the physics, is most of a step's
cost on a CPU: :mod:`.tasks`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from prismatic_tr.envs.metaworld.env import MetaWorldEnv
from prismatic_tr.envs.metaworld.tasks import (
    DEFAULT_IMAGE_SIZE,
    RENDER_SHADOWS,
    THIRD_PERSON_CAMERA,
    WRIST_CAMERA,
)


class LazyObservation:
    """An observation of a :class:`MetaWorldEpisode` at one step; frames drawn when first read (module docstring)."""

    def __init__(self, episode: MetaWorldEpisode, state: np.ndarray) -> None:
        self._episode, self._step = episode, episode.env.steps
        self.instruction = episode.instruction
        self.proprio = state
        self._frames: dict[str, np.ndarray] = {}

    def _frame(self, camera: str) -> np.ndarray:
        if camera not in self._frames:
            if self._episode.env.steps != self._step or self._episode.closed:
                raise RuntimeError(f"this observation is of step {self._step}; the episode has moved on (or closed), "
                                   "so its frames can no longer be drawn: read frames before stepping")
            self._frames[camera] = self._episode.env.render(camera)
        return self._frames[camera]

    @property
    def image(self) -> np.ndarray:
        """(S, S, 3) uint8: the eye-in-hand camera (``gripperPOV``), as the tabletop observation's ``image``."""
        return self._frame(WRIST_CAMERA)

    @property
    def third_person(self) -> np.ndarray:
        """(S, S, 3) uint8: the fixed camera (``corner3``), OFT's primary view."""
        return self._frame(THIRD_PERSON_CAMERA)


@dataclass(frozen=True)
class EpisodeStepInfo:
    """A step's details: ``outcome`` ("running" / "success" / "timeout"), ``steps`` so far, ``success``, and the
    4-D ``action`` MetaWorld applied."""

    success: bool
    outcome: str
    steps: int
    action: np.ndarray


class EpisodeStep(NamedTuple):
    """``step`` result; unpacks as ``obs, reward, done, info`` like the tabletop task's."""

    observation: LazyObservation
    reward: float
    done: bool
    info: EpisodeStepInfo


class MetaWorldEpisode:
    """Episode ``seed`` of ``task`` (a :class:`MetaWorldEnv` that renders on demand); see the module docstring.

    ``env`` / ``release``: run on this environment (of ``task``, rendering on demand) and hand it to ``release`` on
    :meth:`close` instead of closing it (:class:`EpisodePool`)."""

    def __init__(self, task: str, seed: int, image_size: int = DEFAULT_IMAGE_SIZE, max_steps: int | None = None,
                 shadows: bool = RENDER_SHADOWS, env: MetaWorldEnv | None = None,
                 release: Callable[[MetaWorldEnv], None] | None = None) -> None:
        if env is None:
            env = MetaWorldEnv(task, image_size, render=True, max_steps=max_steps, shadows=shadows, on_demand=True)
        elif env.task.name != task or not env.on_demand:
            raise ValueError(f"env is a {env.task.name!r} environment (on_demand={env.on_demand}); the episode needs "
                             f"{task!r} rendering on demand")
        self.env, self._release = env, release
        self.seed, self.task = int(seed), self.env.task.name
        self.instruction = self.env.instruction
        self.closed = False

    @property
    def kind(self) -> str:
        """The task's name, as a recorded episode's ``kind``."""
        return self.task

    @property
    def target(self) -> str:
        """The episode's goal vector as text (after :meth:`reset`), as a recorded episode's ``target``."""
        return self.env.target

    @property
    def state(self) -> np.ndarray:
        """(7,) float32: the state now (the current observation's ``proprio``)."""
        return self.env.state

    def reset(self) -> LazyObservation:
        return LazyObservation(self, self.env.reset(self.seed).state)

    def step(self, action: np.ndarray) -> EpisodeStep:
        """Apply the 7-D ``action``; RuntimeError once the episode is over."""
        step = self.env.step(action)
        info = EpisodeStepInfo(step.info["success"], step.info["outcome"], step.info["steps"], step.info["action"])
        return EpisodeStep(LazyObservation(self, step.observation.state), step.reward, step.done, info)

    def close(self) -> None:
        """Free the renderer and the simulation (or hand the environment back to its pool); safe to call twice."""
        if not self.closed:
            self.closed = True
            if self._release is not None:
                self._release(self.env)
            else:
                self.env.close()


class EpisodePool:
    """Episodes of one task on reused environments: building a :class:`MetaWorldEnv` (the MuJoCo model and its
    renderer's GL context) takes ~0.7 s on a CPU, a reset to another seed a few milliseconds, and a reset sets the
    scene from the seed alone (:func:`~prismatic_tr.envs.metaworld.env.reset_seeded`), so an episode on a reused
    environment is the episode on a new one.

        with EpisodePool("push-v3", 224) as pool:
            episode = pool.episode(3_000_000)      # a MetaWorldEpisode; close() hands its env back
    """

    def __init__(self, task: str, image_size: int = DEFAULT_IMAGE_SIZE, max_steps: int | None = None,
                 shadows: bool = RENDER_SHADOWS) -> None:
        self.task, self.image_size, self.max_steps, self.shadows = task, image_size, max_steps, shadows
        self._free: list[MetaWorldEnv] = []
        self.built = 0

    def episode(self, seed: int) -> MetaWorldEpisode:
        """Episode ``seed`` on a free environment (a new one when none is free)."""
        if self._free:
            env = self._free.pop()
        else:
            env = MetaWorldEnv(self.task, self.image_size, render=True, max_steps=self.max_steps,
                               shadows=self.shadows, on_demand=True)
            self.built += 1
        return MetaWorldEpisode(self.task, seed, env=env, release=self._free.append)

    def close(self) -> None:
        """Close every free environment (episodes still open close theirs when they close)."""
        while self._free:
            self._free.pop().close()

    def __enter__(self) -> EpisodePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
