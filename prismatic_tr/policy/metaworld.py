"""Closed-loop evaluation of a policy on MetaWorld (``prismatic_tr.envs.metaworld``), task by task.

    from prismatic_tr.policy.metaworld import run_metaworld, metaworld_record
    outcomes = run_metaworld(vla, processor, ["reach-v3", "push-v3"], "test", 50, unnorm_key="metaworld_mt10")
    record = metaworld_record(outcomes, "test")     # per task: success, Wilson 95 % interval, failed seeds; the mean
    settings = [parse_setting(s) for s in TABLE_SETTINGS]                  # prismatic_tr.vla.spec
    rows = evaluate_metaworld_settings(vla, processor, settings, MT10, "test", 50, "metaworld_mt10")
    # the reduction table: one row per setting, success per task and the mean, predict_action timed interleaved

Each task's episodes are the first ``episodes`` seeds of the seed ``split`` (the same seeds for every task and every
setting), run by :func:`prismatic_tr.policy.closed_loop.run_episodes` in lockstep batches, each a
:class:`~prismatic_tr.envs.metaworld.episode.MetaWorldEpisode` that draws its frames only when the policy reads
them, on environments a task's batches reuse (:class:`~prismatic_tr.envs.metaworld.episode.EpisodePool`). mujoco with OSMesa cannot share a process with tensorflow: run this where tensorflow was never imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.policy.closed_loop import EpisodeOutcome, evaluation_record, observing, run_episodes

# The reduction table's settings (vla.spec): unreduced, the projector and vision sites at keep 0.5 / 0.25 / 0.1
# with `diverse` (the default in 0.5.0; vision cut after 1/4 of the towers), and the llm site in the one pass.
TABLE_SETTINGS = ("none", "diverse:0.5", "diverse:0.25", "diverse:0.1", "vision:diverse:0.5@0.25",
                  "vision:diverse:0.25@0.25", "vision:diverse:0.1@0.25", "llm:attention:0.5@0.25")


def run_metaworld(vla: nn.Module, processor: object, tasks: Sequence[str], split: str, episodes: int,
                  unnorm_key: str, image_size: int = 224, batch_size: int = 10, execute_steps: int | None = None,
                  max_steps: int | None = None,
                  on_episode: Callable[[EpisodeOutcome], None] | None = None) -> dict[str, list[EpisodeOutcome]]:
    """``{task: outcomes}``: ``episodes`` episodes of each task from the seed ``split`` (ValueError naming a bad
    task, split or count before any episode runs); ``max_steps``: a cap below the tasks' own (default: theirs)."""
    from prismatic_tr.envs.metaworld.episode import EpisodePool
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.metaworld.tasks import check_image_size, metaworld_task
    from prismatic_tr.envs.splits import split_seeds

    for task in tasks:
        metaworld_task(task)
    check_image_size(image_size)
    seeds = split_seeds(split, episodes, splits=METAWORLD_SPLITS)
    check_policy_state(vla)
    outcomes = {}
    for task in tasks:
        with EpisodePool(task, image_size, max_steps) as pool:  # a batch's environments serve the next batch
            outcomes[task] = run_episodes(vla, processor, seeds, unnorm_key, batch_size=batch_size,
                                          on_episode=on_episode, execute_steps=execute_steps, make_env=pool.episode)
    return outcomes


def check_policy_state(vla: nn.Module) -> None:
    """ValueError when an OFT policy's proprio size is not the MetaWorld state's (an OpenVLA one takes none)."""
    from prismatic_tr.envs.metaworld.tasks import STATE_DIM, STATE_FIELDS

    size = observing(vla).proprio_dim(vla)
    if size is not None and size != STATE_DIM:
        raise ValueError(f"the policy takes a state of {size}; MetaWorld episodes give {STATE_DIM} "
                         f"({', '.join(STATE_FIELDS)}): train it on demonstrations written with that state")


def metaworld_record(outcomes: dict[str, list[EpisodeOutcome]], split: str) -> dict[str, Any]:
    """Per task :func:`~prismatic_tr.policy.closed_loop.evaluation_record`, and ``mean_success_rate``: the
    unweighted mean over tasks (as MetaWorld and LIBERO tables average them)."""
    per_task = {task: evaluation_record(o, split) for task, o in outcomes.items()}
    rates = [r["success_rate"] for r in per_task.values()]
    return {"split": split, "tasks": per_task, "mean_success_rate": float(np.mean(rates)) if rates else float("nan")}


def time_metaworld_settings(vla: nn.Module, processor: object, settings: Sequence[Any], task: str, seed: int,
                            unnorm_key: str, image_size: int = 224, warmup: int = 2,
                            repeats: int = 10) -> dict[str, Any]:
    """``predict_action`` at batch 1 per setting (:class:`~prismatic_tr.vla.spec.Setting`), round-robin on the
    first observation of episode ``seed`` of ``task`` (both cameras and the state, as the closed loop passes
    them), each reduction attached outside the timed region; ``{label: TimingStats}``."""
    from prismatic_tr.bench.measure.timing import interleaved
    from prismatic_tr.envs.metaworld.episode import MetaWorldEpisode
    from prismatic_tr.policy.closed_loop import policy_inputs
    from prismatic_tr.vla import reductions_attached

    env = MetaWorldEpisode(task, seed, image_size)
    try:
        inputs = policy_inputs(vla, processor, env, env.reset(), unnorm_key)
    finally:
        env.close()
    fns = {s.label: (lambda: vla.predict_action(**inputs)) for s in settings}
    contexts = {s.label: (lambda s=s: reductions_attached(vla, s.reductions(0))) for s in settings}
    with torch.no_grad():
        return interleaved(fns, warmup=warmup, repeats=repeats, contexts=contexts)


def evaluate_metaworld_settings(vla: nn.Module, processor: object, settings: Sequence[Any], tasks: Sequence[str],
                                split: str, episodes: int, unnorm_key: str, image_size: int = 224,
                                batch_size: int = 10, execute_steps: int | None = None, timing_repeats: int = 10,
                                timing_warmup: int = 2,
                                on_episode: Callable[[str, EpisodeOutcome], None] | None = None,
                                workers: Any = None,
                                on_job: Callable[[str, str, list[EpisodeOutcome]], None] | None = None,
                                done: Mapping[tuple[str, str], list[EpisodeOutcome]] | None = None,
                                ) -> list[dict[str, Any]]:
    """One record per setting (the unreduced baseline first; ValueError otherwise): the same ``episodes`` seeds of
    ``split`` for every task, success per task with its Wilson interval, the mean over tasks, the visual tokens
    the language model gets (and keeps past the llm site's cut), and ``predict_action`` medians at batch 1 with
    the speedup over the baseline (timed first, interleaved; None with ``timing_repeats=0``). ``workers``: a
    :class:`~prismatic_tr.policy.metaworld_workers.MetaWorldWorkers` holding the same checkpoint runs the episodes
    (``vla`` then only counts tokens and is timed, alone, before any episode starts). ``done``: the outcomes of
    (setting label, task) jobs an earlier run finished (a :class:`~prismatic_tr.policy.job_journal.JobJournal`'s),
    reused instead of run; ``on_job(label, task, outcomes)`` as each other job finishes (to journal it)."""
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.splits import split_seeds
    from prismatic_tr.policy.evaluate import add_speedups, setting_fields
    from prismatic_tr.vla import reductions_attached, visual_token_count

    if not settings or not settings[0].is_baseline:
        raise ValueError("settings must start with the unreduced baseline ('none')")
    seeds = split_seeds(split, episodes, splits=METAWORLD_SPLITS)
    timing = (time_metaworld_settings(vla, processor, settings, tasks[0], seeds[0], unnorm_key, image_size,
                                      timing_warmup, timing_repeats) if timing_repeats > 0 else None)
    runs = run_metaworld_jobs(vla, processor, settings, tasks, split, episodes, unnorm_key, image_size, batch_size,
                              execute_steps, on_episode, workers, on_job, done)
    records = []
    for s in settings:
        with reductions_attached(vla, s.reductions(0)):
            tokens = visual_token_count(vla)
        record = metaworld_record(runs[s.label], split)
        records.append({**setting_fields(s, tokens, timing), "mean_success_rate": record["mean_success_rate"],
                        "successes": sum(t["successes"] for t in record["tasks"].values()),
                        "episodes": sum(t["episodes"] for t in record["tasks"].values()), "tasks": record["tasks"]})
    return add_speedups(records)


def run_metaworld_jobs(vla: nn.Module, processor: object, settings: Sequence[Any], tasks: Sequence[str], split: str,
                       episodes: int, unnorm_key: str, image_size: int = 224, batch_size: int = 10,
                       execute_steps: int | None = None,
                       on_episode: Callable[[str, EpisodeOutcome], None] | None = None, workers: Any = None,
                       on_job: Callable[[str, str, list[EpisodeOutcome]], None] | None = None,
                       done: Mapping[tuple[str, str], list[EpisodeOutcome]] | None = None,
                       ) -> dict[str, dict[str, list[EpisodeOutcome]]]:
    """``{setting label: {task: outcomes}}``: every (setting, task) job not in ``done``, run by ``workers`` or here
    with the setting attached for its jobs alone; ``on_job`` and ``on_episode`` as in
    :func:`evaluate_metaworld_settings`."""
    from prismatic_tr.vla import reductions_attached

    done = dict(done or {})

    def finished(label: str, task: str, outcomes: list[EpisodeOutcome], from_worker: bool) -> None:
        if from_worker and on_episode is not None:  # a worker reports a job's episodes when the job ends
            for o in outcomes:
                on_episode(label, o)
        if on_job is not None:
            on_job(label, task, outcomes)

    if workers is not None:
        return workers.run([s.label for s in settings], tasks, split, episodes, unnorm_key, image_size, batch_size,
                           execute_steps, on_job=lambda label, task, o: finished(label, task, o, True), done=done)
    runs: dict[str, dict[str, list[EpisodeOutcome]]] = {}
    for s in settings:
        runs[s.label] = {}
        for task in tasks:
            if (s.label, task) in done:
                runs[s.label][task] = done[s.label, task]
                continue
            with reductions_attached(vla, s.reductions(0)):
                runs[s.label][task] = run_metaworld(
                    vla, processor, [task], split, episodes, unnorm_key, image_size, batch_size, execute_steps,
                    on_episode=(lambda o, s=s: on_episode(s.label, o)) if on_episode else None)[task]
            finished(s.label, task, runs[s.label][task], False)
    return runs
