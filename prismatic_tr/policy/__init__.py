"""Policies in the tabletop task: closed-loop and offline evaluation of reduction settings, the bundled
trained policy, and the recipe that trains it. Depends on ``envs``, ``models``, ``vla``, ``training``."""

from prismatic_tr.policy.bundled import (
    BUNDLED_POLICY_DIR,
    UNNORM_KEY,
    bundled_policy_dir,
    load_bundled_policy,
)
from prismatic_tr.policy.closed_loop import EpisodeOutcome, SuccessSummary, run_episodes

__all__ = [
    "BUNDLED_POLICY_DIR",
    "UNNORM_KEY",
    "EpisodeOutcome",
    "SuccessSummary",
    "bundled_policy_dir",
    "load_bundled_policy",
    "run_episodes",
]
