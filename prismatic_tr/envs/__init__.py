"""A procedurally generated tabletop task with a scripted expert (numpy + Pillow; no torch, no simulator).

    from prismatic_tr.envs import ScriptedExpert, TaskConfig, make_episode, rollout
    env = make_episode(seed=3)                      # objects, target, instruction, look: all from the seed
    obs = env.reset()                               # obs.image (224, 224, 3) uint8, obs.instruction str
    obs, reward, done, info = env.step(action)      # action (7,): dx dy dz droll dpitch dyaw gripper
    result = rollout(env, ScriptedExpert().policy(env))   # or any policy_fn(image, instruction) -> (7,)

Frames, units, action clipping and success tolerances: :mod:`prismatic_tr.envs.spec`. Writing expert
episodes as an RLDS dataset: :mod:`prismatic_tr.envs.demos` (imports tensorflow, after torch). Which seeds each
use may draw (demonstrations, pretraining scenes, validation, offline, test): :mod:`prismatic_tr.envs.splits`.
"""

from prismatic_tr.envs.env import (
    RUNNING,
    SUCCESS,
    TIMEOUT,
    WRONG_OBJECT,
    EnvState,
    Observation,
    StepInfo,
    StepResult,
    TabletopEnv,
    in_grasp_zone,
    make_episode,
)
from prismatic_tr.envs.expert import PolicyFn, ScriptedExpert
from prismatic_tr.envs.rollout import EpisodeResult, ExecutionNoise, rollout
from prismatic_tr.envs.scene import Scene, SceneObject, TaskConfig, sample_scene
from prismatic_tr.envs.splits import SPLITS, SeedSplit, check_seeds, split_seeds

__all__ = [
    "RUNNING",
    "SPLITS",
    "SUCCESS",
    "TIMEOUT",
    "WRONG_OBJECT",
    "check_seeds",
    "EnvState",
    "EpisodeResult",
    "ExecutionNoise",
    "Observation",
    "PolicyFn",
    "Scene",
    "SceneObject",
    "SeedSplit",
    "ScriptedExpert",
    "StepInfo",
    "StepResult",
    "TabletopEnv",
    "TaskConfig",
    "in_grasp_zone",
    "make_episode",
    "rollout",
    "sample_scene",
    "split_seeds",
]
