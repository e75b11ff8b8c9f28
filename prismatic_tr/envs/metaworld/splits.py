"""Seed splits of the MetaWorld tasks and the check that the test split's goals are held out.

An episode is a (task, seed) pair: the seed sets where MetaWorld puts the objects and the goal
(:meth:`prismatic_tr.envs.metaworld.env.MetaWorldEnv.reset`), so every task has the same seed ranges, taken from the
tabletop task's splits of the same name (:mod:`prismatic_tr.envs.splits`)::

    demonstrations              0 -   499,999   expert demonstrations (training data)
    validation          1,000,000 - 1,999,999   closed-loop episodes that choose (where to stop, settings)
    test                3,000,000 - 3,999,999   held out: reported only

    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.splits import split_seeds
    seeds = split_seeds("test", 50, splits=METAWORLD_SPLITS)      # range(3_000_000, 3_000_050), every task

Other seeds belong to no MetaWorld split. Held-out goals: a seed's goal vector is the random vector MetaWorld
drew for it (object and goal positions, ``_last_rand_vec``; :func:`prismatic_tr.envs.metaworld.env.goal_vectors`);
:func:`check_held_out_goals` refuses a test set any of whose vectors lies within ``tol`` (max-norm, metres) of a
demonstration vector. Continuous draws make a repeat unlikely, not impossible, so the check is what makes it so.
"""

from __future__ import annotations

import numpy as np

from prismatic_tr.envs.splits import DEMONSTRATIONS, SPLITS, TEST, VALIDATION

METAWORLD_SPLITS = {name: SPLITS[name] for name in (DEMONSTRATIONS, VALIDATION, TEST)}
GOAL_TOLERANCE = 1e-3   # metres (max-norm over the vector): closer than this counts as the same goal


def nearest_goal_distance(test: np.ndarray, demos: np.ndarray) -> np.ndarray:
    """(n,) max-norm distance from each test vector (n, d) to its nearest demonstration vector (m, d)."""
    test, demos = np.atleast_2d(np.asarray(test, np.float64)), np.atleast_2d(np.asarray(demos, np.float64))
    if test.shape[1] != demos.shape[1]:
        raise ValueError(f"goal vectors of different lengths: test {test.shape}, demonstrations {demos.shape}")
    return np.abs(test[:, None, :] - demos[None, :, :]).max(axis=-1).min(axis=1)


def check_held_out_goals(task: str, test: np.ndarray, demos: np.ndarray, tol: float = GOAL_TOLERANCE) -> float:
    """The smallest test-to-demonstration goal distance of ``task``; ValueError naming the test rows within ``tol``."""
    dist = nearest_goal_distance(test, demos)
    close = np.flatnonzero(dist < tol)
    if close.size:
        raise ValueError(f"{task}: test goal vectors {close.tolist()} lie within {tol} m of a demonstration goal "
                         f"(distances {dist[close].round(6).tolist()}); the test goals are not held out")
    return float(dist.min())
