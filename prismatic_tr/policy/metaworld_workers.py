"""MetaWorld closed loops in parallel worker processes, each holding its own copy of a checkpoint.

    with MetaWorldWorkers("outputs/metaworld_policy/policy", workers=2) as pool:
        outcomes = pool.run(["none", "vision:diverse:0.1@0.25"], MT10, "test", 50, "metaworld_mt10")
        # {setting label: {task: [EpisodeOutcome, ...]}}, the same as run_metaworld in one process gives

A MetaWorld episode spends much of its time where one core works alone (MuJoCo's physics and OSMesa's software
rendering, both single-threaded), so on a small policy two processes with one torch thread each finish a table
sooner than one process with two threads. Each (setting, task) pair is one job, so the workers stay busy until the
last pair. Workers are spawned (never forked): a parent that imported tensorflow (training does) cannot share
OSMesa's mujoco with it, and a spawned child imports neither until it needs them. Each worker loads the checkpoint
once and attaches a job's setting only for that job (:func:`prismatic_tr.vla.reductions_attached`), so a job
sees the model exactly as loaded whatever ran before it in that process.

Each worker holds a whole model: fine for the MetaWorld policies here (a few million parameters); with a 7B one,
use ``workers=1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.policy.closed_loop import EpisodeOutcome

_WORKER: dict[str, Any] = {}   # in a worker process: "vla", "processor" (set once by _start_worker)


def _start_worker(checkpoint: str, threads: int) -> None:
    """Worker initializer: ``threads`` torch threads and the checkpoint loaded once."""
    torch.set_num_threads(threads)
    from prismatic_tr.models import load_vla

    _WORKER["vla"], _WORKER["processor"] = load_vla(Path(checkpoint))


def _run_job(setting: str, task: str, split: str, episodes: int, unnorm_key: str, image_size: int,
             batch_size: int, execute_steps: int | None, seed: int) -> list[EpisodeOutcome]:
    """In a worker: ``episodes`` episodes of ``task`` with ``setting`` attached for them alone."""
    from prismatic_tr.policy.metaworld import run_metaworld
    from prismatic_tr.vla import reductions_attached
    from prismatic_tr.vla.spec import parse_setting

    vla = _WORKER["vla"]
    with reductions_attached(vla, parse_setting(setting).reductions(seed)):
        return run_metaworld(vla, _WORKER["processor"], [task], split, episodes, unnorm_key, image_size=image_size,
                             batch_size=batch_size, execute_steps=execute_steps)[task]


def worker_threads(workers: int, threads: int | None = None) -> int:
    """Torch threads per worker: the parent's (or ``threads``) split evenly, at least 1."""
    return max(1, (threads or torch.get_num_threads()) // workers)


class MetaWorldWorkers:
    """``workers`` spawned processes, each with the checkpoint at ``checkpoint`` loaded and ``threads`` torch threads
    (default: the parent's split evenly); a context manager that shuts them down on exit."""

    def __init__(self, checkpoint: str | Path, workers: int = 1, threads: int | None = None) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers {workers!r} is not allowed; use an integer >= 1")
        if not (Path(checkpoint) / "config.json").is_file():
            raise ValueError(f"checkpoint {str(checkpoint)!r} is not a checkpoint directory (no config.json)")
        self.checkpoint, self.workers = str(checkpoint), workers
        self.threads = worker_threads(workers) if threads is None else threads
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> MetaWorldWorkers:
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=get_context("spawn"),
                                         initializer=_start_worker, initargs=(self.checkpoint, self.threads))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def run(self, settings: Sequence[str], tasks: Sequence[str], split: str, episodes: int, unnorm_key: str,
            image_size: int = 224, batch_size: int = 10, execute_steps: int | None = None, seed: int = 0,
            on_job: Callable[[str, str, list[EpisodeOutcome]], None] | None = None,
            done: Mapping[tuple[str, str], list[EpisodeOutcome]] | None = None,
            ) -> dict[str, dict[str, list[EpisodeOutcome]]]:
        """``{setting: {task: outcomes}}`` (both in the order given) for every pair, run as one job each unless
        ``done`` (a :class:`~prismatic_tr.policy.job_journal.JobJournal`'s) holds it already; ``on_job(setting,
        task, outcomes)`` as each job finishes. Settings and tasks are checked before any job."""
        from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
        from prismatic_tr.envs.metaworld.tasks import check_image_size, metaworld_task
        from prismatic_tr.envs.splits import split_seeds
        from prismatic_tr.vla.spec import parse_setting

        if self._pool is None:
            raise RuntimeError("MetaWorldWorkers.run outside its `with` block")
        for s in settings:
            parse_setting(s).reductions(seed)
        for task in tasks:
            metaworld_task(task)
        check_image_size(image_size)
        split_seeds(split, episodes, splits=METAWORLD_SPLITS)
        results = {pair: list(outcomes) for pair, outcomes in (done or {}).items()}
        futures = {self._pool.submit(_run_job, s, task, split, episodes, unnorm_key, image_size, batch_size,
                                     execute_steps, seed): (s, task)
                   for s in settings for task in tasks if (s, task) not in results}
        for future in as_completed(futures):
            s, task = futures[future]
            results[s, task] = future.result()
            if on_job is not None:
                on_job(s, task, results[s, task])
        return {s: {task: results[s, task] for task in tasks} for s in settings}
