"""Closed-loop evaluation of a policy on MetaWorld (``prismatic_tr.envs.metaworld``), task by task.

    from prismatic_tr.policy.metaworld import run_metaworld, metaworld_record
    outcomes = run_metaworld(vla, processor, ["reach-v3", "push-v3"], "test", 50, unnorm_key="metaworld_mt10")
    record = metaworld_record(outcomes, "test")     # per task: success, Wilson 95 % interval, failed seeds; the mean

Each task's episodes are the first ``episodes`` seeds of the seed ``split`` (the same seeds for every task and every
setting), run by :func:`prismatic_tr.policy.closed_loop.run_episodes` in lockstep batches, each a
:class:`~prismatic_tr.envs.metaworld.episode.MetaWorldEpisode` that draws its frames only when the policy reads
them. mujoco with OSMesa cannot share a process with tensorflow: run this where tensorflow was never imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch import nn

from prismatic_tr.policy.closed_loop import EpisodeOutcome, evaluation_record, run_episodes


def run_metaworld(vla: nn.Module, processor: object, tasks: Sequence[str], split: str, episodes: int,
                  unnorm_key: str, image_size: int = 224, batch_size: int = 10, execute_steps: int | None = None,
                  max_steps: int | None = None,
                  on_episode: Callable[[EpisodeOutcome], None] | None = None) -> dict[str, list[EpisodeOutcome]]:
    """``{task: outcomes}``: ``episodes`` episodes of each task from the seed ``split`` (ValueError naming a bad
    task, split or count before any episode runs); ``max_steps``: a cap below the tasks' own (default: theirs)."""
    from prismatic_tr.envs.metaworld.episode import MetaWorldEpisode
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.metaworld.tasks import check_image_size, metaworld_task
    from prismatic_tr.envs.splits import split_seeds

    for task in tasks:
        metaworld_task(task)
    check_image_size(image_size)
    seeds = split_seeds(split, episodes, splits=METAWORLD_SPLITS)
    return {task: run_episodes(vla, processor, seeds, unnorm_key, batch_size=batch_size, on_episode=on_episode,
                               execute_steps=execute_steps,
                               make_env=lambda seed, t=task: MetaWorldEpisode(t, seed, image_size, max_steps))
            for task in tasks}


def metaworld_record(outcomes: dict[str, list[EpisodeOutcome]], split: str) -> dict[str, Any]:
    """Per task :func:`~prismatic_tr.policy.closed_loop.evaluation_record`, and ``mean_success_rate``: the
    unweighted mean over tasks (as MetaWorld and LIBERO tables average them)."""
    per_task = {task: evaluation_record(o, split) for task, o in outcomes.items()}
    rates = [r["success_rate"] for r in per_task.values()]
    return {"split": split, "tasks": per_task, "mean_success_rate": float(np.mean(rates)) if rates else float("nan")}
