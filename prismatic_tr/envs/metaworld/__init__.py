"""MetaWorld (v3, MT10) as a second benchmark: environment adapter, scripted experts, seed splits, demonstrations.

    from prismatic_tr.envs.metaworld import MetaWorldEnv, rollout, scripted_expert
    with MetaWorldEnv("pick-place-v3", image_size=224) as env:      # needs the metaworld extra and OSMesa
        result = rollout(env, scripted_expert("pick-place-v3"), seed=0, record=True)

Tasks, instructions, step caps, cameras and state fields: :mod:`~prismatic_tr.envs.metaworld.tasks`; the 7-D <->
4-D action mapping: :mod:`~prismatic_tr.envs.metaworld.actions`; seeds and held-out goals:
:mod:`~prismatic_tr.envs.metaworld.splits`; the environment: :mod:`~prismatic_tr.envs.metaworld.env`;
demonstrations as RLDS (OFT's LIBERO layout): :mod:`~prismatic_tr.envs.metaworld.demos` and
``vla_scripts/make_metaworld_demos.py``. Importing this package does not import metaworld or mujoco (that happens
when an environment is made), so it works without the extra.
"""

from prismatic_tr.envs.metaworld.actions import ACTION_SCALE, from_metaworld, to_metaworld
from prismatic_tr.envs.metaworld.env import (
    MetaWorldEnv,
    MetaWorldObservation,
    MetaWorldPolicyFn,
    MetaWorldStep,
    goal_vectors,
    scripted_expert,
)
from prismatic_tr.envs.metaworld.rollout import expert_table, rollout
from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS, check_held_out_goals, nearest_goal_distance
from prismatic_tr.envs.metaworld.tasks import (
    MT10,
    TASKS,
    THIRD_PERSON_CAMERA,
    WRIST_CAMERA,
    MetaWorldTask,
    metaworld_task,
)

__all__ = [
    "ACTION_SCALE",
    "METAWORLD_SPLITS",
    "MT10",
    "TASKS",
    "THIRD_PERSON_CAMERA",
    "WRIST_CAMERA",
    "MetaWorldEnv",
    "MetaWorldObservation",
    "MetaWorldPolicyFn",
    "MetaWorldStep",
    "MetaWorldTask",
    "check_held_out_goals",
    "expert_table",
    "from_metaworld",
    "goal_vectors",
    "metaworld_task",
    "nearest_goal_distance",
    "rollout",
    "scripted_expert",
    "to_metaworld",
]
