"""MetaWorld's scripted experts written as an RLDS dataset in OFT's LIBERO layout (the tabletop task's writer).

    from prismatic_tr.envs.metaworld.demos import MetaWorldDemoConfig, make_metaworld_demos
    report = make_metaworld_demos(MetaWorldDemoConfig(episodes_per_task=50, output_dir=Path("datasets")))
    # -> datasets/metaworld_mt10/1.0.0 (RLDS, split "train"), datasets/metaworld_mt10/demos.json

Layout (:mod:`prismatic_tr.envs.rlds`, ``third_person=True``): ``observation/image`` the ``corner3`` camera,
``observation/wrist_image`` the ``gripperPOV`` camera (both ``image_size`` square, PNG), ``observation/state`` (7,)
float32, ``action`` (7,) float32 (:mod:`prismatic_tr.envs.metaworld.actions`), ``language_instruction``;
``episode_metadata``: ``seed``, ``success`` (always true here), ``outcome``, ``kind`` (the task's name), ``target``
(the episode's object / goal vector as text). The split "train" holds every task's episodes, task by task.

Only successful episodes are training data: for each task the expert runs seeds ``seed``, ``seed + 1``, ... and
writes the episodes that succeed within the task's step cap, until ``episodes_per_task`` are written (or the task's
own count in ``task_episodes``, e.g. more of the tasks a policy finds hard); a failed seed
is skipped (not written) and listed under ``failed_seeds`` in ``demos.json``. A task tries at most
``episodes_per_task + max_failures`` seeds: with more than ``max_failures`` failures it stops short and
``demos.json`` says so (``stopped_short``, ``written`` < ``episodes_per_task``). All those seeds must lie in the
demonstrations seed split (0-499,999).

The episodes run in a spawned child process and reach the writer one at a time (:func:`expert_stream`: OSMesa and
tensorflow cannot share a process).
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import json
import multiprocessing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prismatic_tr.cli import check_int_flag
from prismatic_tr.envs.demos import (
    SUMMARY_FILENAME,
    DemoReport,
    SplitSummary,
    _config_dict,
    _progress,
    check_dataset_flags,
    check_output,
)
from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
from prismatic_tr.envs.metaworld.tasks import (
    DEFAULT_IMAGE_SIZE,
    MT10,
    RENDER_SHADOWS,
    check_image_size,
    metaworld_task,
)
from prismatic_tr.envs.rollout import EpisodeResult
from prismatic_tr.envs.splits import DEMONSTRATIONS, check_seeds


@dataclass
class MetaWorldDemoConfig:
    """Run MetaWorld's scripted experts (prismatic_tr.envs.metaworld) and write their successful episodes as an
    RLDS dataset in OFT's LIBERO layout (--data_root_dir <output_dir> --dataset_name <dataset_name>)."""

    # fmt: off
    tasks: list[str] = field(default_factory=lambda: list(MT10))  # MetaWorld v3 tasks (default: MT10's ten)
    episodes_per_task: int = 50             # successful episodes written per task
    task_episodes: dict[str, int] = field(default_factory=dict)  # per-task counts overriding episodes_per_task
                                            #   (e.g. '{reach-v3: 100, push-v3: 100}')
    max_failures: int = 10                  # failed seeds skipped per task before it stops short
    seed: int = 0                           # first seed of every task (in the demonstrations split, 0-499,999)
    output_dir: Path = Path("datasets")     # data_root_dir: writes <output_dir>/<dataset_name>/1.0.0
    dataset_name: str = "metaworld_mt10"    # tfds dataset name (lower-case letters, digits, _)
    image_size: int = DEFAULT_IMAGE_SIZE    # both cameras' frames are image_size x image_size
    shadows: bool = RENDER_SHADOWS          # render shadows (6x slower on a CPU)
    overwrite: bool = False                 # replace an existing dataset of this name
    progress: bool = True                   # progress bar on stderr
    # fmt: on

    def __post_init__(self) -> None:
        check_dataset_flags(self, {"episodes_per_task": 1, "max_failures": 0, "seed": 0})
        if not self.tasks or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"--tasks {self.tasks!r} is not allowed; name each task once, from {list(MT10)}")
        for task in self.tasks:
            metaworld_task(task)
        check_task_episodes(self.task_episodes, self.tasks)
        check_image_size(self.image_size)
        check_seeds(DEMONSTRATIONS, self.seed, self.seeds_per_task,
                    job=f"--seed {self.seed} with up to {self.seeds_per_task} seeds per task (the most episodes "
                        f"asked of a task + {self.max_failures} failures)",
                    splits=METAWORLD_SPLITS)

    def episodes_of(self, task: str) -> int:
        """Successful episodes written for ``task`` (``task_episodes``, else ``episodes_per_task``)."""
        return self.task_episodes.get(task, self.episodes_per_task)

    @property
    def seeds_per_task(self) -> int:
        """The most seeds any task may use (every one written or failed)."""
        return max(self.episodes_of(t) for t in self.tasks) + self.max_failures

    def seed_range(self, task: str) -> range:
        """The seeds ``task`` may use, in order."""
        return range(self.seed, self.seed + self.episodes_of(task) + self.max_failures)

    @property
    def dataset_dir(self) -> Path:
        return self.output_dir / self.dataset_name


def check_task_episodes(counts: dict[str, int], tasks: list[str]) -> None:
    """ValueError unless every key of ``counts`` is one of ``tasks`` and every value an integer >= 1."""
    for task, n in counts.items():
        if task not in tasks:
            raise ValueError(f"--task_episodes names {task!r}, which is not among --tasks {list(tasks)}")
        check_int_flag(f"task_episodes {task}:", n, 1)


def task_episodes(cfg: MetaWorldDemoConfig, task: str, summary: SplitSummary,
                  failed: list[int]) -> Iterator[EpisodeResult]:
    """The expert's successful recorded episodes of ``task`` (module docstring); every episode run is added to
    ``summary`` and every failed seed to ``failed``. Renders: never call it in a process that imported tensorflow."""
    from prismatic_tr.envs.metaworld.env import MetaWorldEnv, scripted_expert
    from prismatic_tr.envs.metaworld.rollout import rollout

    written = 0
    with MetaWorldEnv(task, cfg.image_size, shadows=cfg.shadows) as env:
        expert = scripted_expert(task)
        for seed in _progress(summary.seeds, task, cfg.progress):
            if written == cfg.episodes_of(task):
                return
            result = rollout(env, expert, seed, record=True)
            summary.add(result)
            if result.success:
                written += 1
                yield result
            else:
                failed.append(seed)


@dataclass
class TaskOutcome:
    """How the expert did on one task (sent after the task's last episode)."""

    task: str
    summary: SplitSummary
    failed_seeds: list[int]


def _expert_items(cfg: MetaWorldDemoConfig) -> Iterator[EpisodeResult | TaskOutcome]:
    """Every task's episodes, then its :class:`TaskOutcome` (run in the child process of :func:`expert_stream`)."""
    for task in cfg.tasks:
        summary, failed = SplitSummary(task, cfg.seed_range(task)), []
        yield from task_episodes(cfg, task, summary, failed)
        yield TaskOutcome(task, summary, failed)


def _child(generate: Callable[..., Iterator[Any]], args: tuple[Any, ...], what: str, send: Any) -> None:
    """Child process of :func:`spawned_stream`: send every item ``generate(*args)`` yields, then None (or the error)."""
    try:
        for item in generate(*args):
            send.send(item)
        send.send(None)
    except BaseException as exc:  # handed to the parent, which raises it
        send.send(RuntimeError(f"the {what} process failed: {type(exc).__name__}: {exc}"))
    finally:
        send.close()


def spawned_stream(generate: Callable[..., Iterator[Any]], args: tuple[Any, ...], what: str) -> Iterator[Any]:
    """Run the generator ``generate(*args)`` (a module-level function, picklable) in a fresh spawned process and
    yield what it yields, one item at a time; its error is raised here (``what`` names the process). Why a
    process: OSMesa loads its own LLVM (libLLVM), tensorflow has another, and one process that loads both crashes
    (segmentation fault, either order); the RLDS writer needs tensorflow, MetaWorld's frames need OSMesa."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    worker = context.Process(target=_child, args=(generate, args, what, send), daemon=True)
    worker.start()
    send.close()
    try:
        while True:
            try:
                item = receive.recv()
            except EOFError:
                worker.join(timeout=10)
                raise RuntimeError(f"the {what} process died (exit code {worker.exitcode})") from None
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        receive.close()
        worker.join(timeout=10)
        if worker.is_alive():
            worker.terminate()


def expert_stream(cfg: MetaWorldDemoConfig) -> Iterator[EpisodeResult | TaskOutcome]:
    """:func:`task_episodes` for every task, each task's :class:`TaskOutcome` after its episodes, run in a
    spawned process (:func:`spawned_stream`) and yielded one episode at a time."""
    return spawned_stream(_expert_items, (cfg,), "MetaWorld expert")


def make_metaworld_demos(cfg: MetaWorldDemoConfig) -> DemoReport:
    """Run the experts, write the RLDS dataset and ``demos.json``; one :class:`SplitSummary` per task in the report."""
    from prismatic_tr.envs.metaworld.tasks import STATE_DIM, STATE_FIELDS
    from prismatic_tr.envs.rlds import write_episodes  # imports torch, then tensorflow

    check_output(cfg)
    outcomes: dict[str, TaskOutcome] = {}

    def episodes() -> Iterator[EpisodeResult]:
        for item in expert_stream(cfg):
            if isinstance(item, TaskOutcome):
                outcomes[item.task] = item
            else:
                yield item

    description = f"MetaWorld v3 scripted experts (prismatic_tr.envs.metaworld); config: {_config_dict(cfg)}"
    version_dir = write_episodes(cfg.output_dir, cfg.dataset_name, {"train": episodes}, description,
                                 third_person=True, image_size=cfg.image_size, state_dim=STATE_DIM)
    tasks = {o.task: {**o.summary.as_dict(), "written": o.summary.outcomes.get("success", 0),
                      "failed_seeds": o.failed_seeds,
                      "stopped_short": o.summary.outcomes.get("success", 0) < cfg.episodes_of(o.task)}
             for o in outcomes.values()}
    first_unseen = max(cfg.seed + len(o.summary.lengths) for o in outcomes.values())
    summary = {"config": _config_dict(cfg), "dataset_dir": str(version_dir), "first_unseen_seed": first_unseen,
               "state_fields": list(STATE_FIELDS), "tasks": tasks, **_versions()}
    summary_path = cfg.dataset_dir / SUMMARY_FILENAME
    summary_path.write_text(json.dumps(summary, indent=2))
    return DemoReport(cfg.output_dir, cfg.dataset_name, version_dir, [o.summary for o in outcomes.values()],
                      first_unseen, summary_path)


def _versions() -> dict[str, Any]:
    from importlib.metadata import version

    return {"metaworld_version": version("metaworld"), "mujoco_version": version("mujoco")}
