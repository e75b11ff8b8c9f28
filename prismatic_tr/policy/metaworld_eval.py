"""Closed-loop evaluation of an OpenVLA-OFT policy on MetaWorld under reduction settings, the work of
``vla_scripts/eval_metaworld.py``: its config, the checkpoint check, the journaled run (a cut-off table resumes from
``<output_dir>/episodes.jsonl``), its provenance record and the CSV rows and terminal table of the results."""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import contextlib
import datetime
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.cli import BadInputError, check_checkpoint_dir, check_int_flag
from prismatic_tr.envs.metaworld.tasks import DEFAULT_IMAGE_SIZE, MT10, check_image_size, metaworld_task
from prismatic_tr.policy.bundled import BUNDLED_METAWORLD_POLICY_DIR
from prismatic_tr.policy.metaworld import TABLE_SETTINGS

JOURNAL = "episodes.jsonl"  # in --output_dir: the finished (setting, task) jobs, so a cut-off table resumes
CSV_COLUMNS = ["setting", "site", "reduction_ratio", "depth_fraction", "num_patches", "task", "episodes", "successes",
               "success_rate", "success_ci_low", "success_ci_high", "mean_steps", "predict_action_ms",
               "predict_action_speedup"]


@dataclass
class EvalMetaWorldConfig:
    # fmt: off
    vla_path: Path = BUNDLED_METAWORLD_POLICY_DIR  # an OFT checkpoint with metaworld_mt10 statistics (default: the
                                                   #   shipped policy, prismatic_tr/assets/metaworld_policy)
    settings: list[str] = field(default_factory=lambda: list(TABLE_SETTINGS))  # specs, the first "none"
    tasks: list[str] = field(default_factory=lambda: list(MT10))  # MetaWorld v3 tasks
    split: str = "test"                      # seed split (test: held-out goals; validation: for choosing)
    episodes: int = 50                       # episodes per task and setting
    unnorm_key: str = "metaworld_mt10"       # the policy's action statistics
    image_size: int = DEFAULT_IMAGE_SIZE     # frames (the demonstrations' size)
    batch_size: int = 10                     # episodes of a task run in lockstep
    execute_steps: int | None = None         # chunk actions run open loop per prediction (null: the whole chunk)
    timing_runs: int = 10                    # predict_action timings per setting (interleaved, batch 1; 0: none)
    output_dir: Path = Path("outputs/eval_metaworld")  # results.json / results.csv
    num_threads: int = 0                     # torch threads (0: torch's default)
    workers: int = 2                         # processes running the episodes, the threads split among them (1: this
                                             #   process); timing always runs here, alone, before any episode
    resume: bool = True                      # reuse the (setting, task) jobs --output_dir's episodes.jsonl journals
                                             #   for the same checkpoint bytes, split, episodes, frames, batch and
                                             #   chunk (false: start afresh, replacing it)
    progress: bool = True                    # progress bar
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
        from prismatic_tr.envs.splits import split_seeds
        from prismatic_tr.vla.spec import parse_setting

        for name, low in (("episodes", 1), ("batch_size", 1), ("timing_runs", 0), ("num_threads", 0), ("workers", 1)):
            check_int_flag(name, getattr(self, name), low)
        if self.execute_steps is not None:
            try:
                check_int_flag("execute_steps", self.execute_steps, 1)
            except ValueError as err:
                raise ValueError(f"{err} (at most the policy's chunk) or null for the whole chunk") from None
        if not self.tasks or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"--tasks {self.tasks!r} is not allowed; name each task once, from {list(MT10)}")
        for task in self.tasks:
            metaworld_task(task)
        check_image_size(self.image_size)
        split_seeds(self.split, self.episodes, splits=METAWORLD_SPLITS)
        self.setting_list = list(dict.fromkeys(parse_setting(s) for s in self.settings))
        if not self.setting_list or not self.setting_list[0].is_baseline:
            raise ValueError(f"--settings {self.settings!r} is not allowed; start with 'none' (the unreduced "
                             "baseline every speedup is relative to)")
        self.vla_path, self.output_dir = Path(self.vla_path), Path(self.output_dir)
        check_checkpoint_dir("vla_path", self.vla_path)
        if self.output_dir.is_file():
            raise ValueError(f"--output_dir {str(self.output_dir)!r} is a file; give a directory")

    def journal_identity(self, patch: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What a journaled job's outcomes depend on besides its setting and task (the checkpoint by its bytes);
        ``patch``: what a benchmark script changes in the model for its run (JSON-able), part of the identity when
        given, so that a plain run and a patched one, or two patches, never share a job."""
        from prismatic_tr.policy.job_journal import checkpoint_fingerprint

        identity = {"checkpoint_sha256": checkpoint_fingerprint(self.vla_path), "split": self.split,
                    "episodes": self.episodes, "unnorm_key": self.unnorm_key, "image_size": self.image_size,
                    "batch_size": self.batch_size, "execute_steps": self.execute_steps}
        return identity if patch is None else {**identity, "patch": dict(patch)}


def load_metaworld_policy(cfg: EvalMetaWorldConfig) -> tuple[Any, Any]:
    """(vla, processor); :class:`~prismatic_tr.cli.BadInputError` when the checkpoint is not an OFT policy with the
    statistics and chunk the flags ask for."""
    from prismatic_tr.models import load_vla
    from prismatic_tr.models.family import family_of

    try:
        vla, processor = load_vla(cfg.vla_path)
        if family_of(vla).name != "openvla-oft":
            raise ValueError("it is not an OpenVLA-OFT policy (MetaWorld episodes take both cameras and the state)")
        stats = sorted(getattr(vla, "norm_stats", None) or {})
        if cfg.unnorm_key not in stats:
            raise ValueError(f"--unnorm_key {cfg.unnorm_key!r} is not among the model's action statistics {stats}")
        if cfg.execute_steps is not None and cfg.execute_steps > vla.oft.num_actions_chunk:
            raise ValueError(f"--execute_steps {cfg.execute_steps} is more than the policy's chunk of "
                             f"{vla.oft.num_actions_chunk} actions")
    except (OSError, ValueError) as err:
        raise BadInputError(f"cannot use {str(cfg.vla_path)!r}: {err}") from None
    return vla, processor


def csv_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting and task, then the setting's mean over tasks (task "mean")."""
    rows = []
    for rec in records:
        common = {k: rec[k] for k in ("setting", "site", "reduction_ratio", "depth_fraction", "num_patches",
                                      "predict_action_ms", "predict_action_speedup")}
        for task, t in rec["tasks"].items():
            rows.append({**common, "task": task, **{k: t[k] for k in ("episodes", "successes", "success_rate",
                                                                      "success_ci_low", "success_ci_high",
                                                                      "mean_steps")}})
        rows.append({**common, "task": "mean", "episodes": rec["episodes"], "successes": rec["successes"],
                     "success_rate": rec["mean_success_rate"]})
    return rows


def table(records: list[dict[str, Any]]) -> str:
    """Success per task (columns) per setting (rows), the mean, and the speedup, as terminal lines."""
    tasks = list(records[0]["tasks"])
    head = f"{'setting':30s} " + " ".join(f"{t.removesuffix('-v3')[:10]:>10s}" for t in tasks) + "   mean  speedup"
    lines = [head]
    for rec in records:
        speed = f"{rec['predict_action_speedup']:.2f}x" if rec["predict_action_speedup"] else "-"
        lines.append(f"{rec['setting']:30s} " + " ".join(f"{rec['tasks'][t]['success_rate']:10.0%}" for t in tasks)
                     + f" {rec['mean_success_rate']:6.1%} {speed:>8s}")
    return "\n".join(lines)


def write_results(output_dir: Path, records: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """``results.json`` (``{"meta", "records"}``) and ``results.csv`` (:func:`csv_rows`) into ``output_dir``."""
    import csv
    import json

    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "results.json").write_text(json.dumps({"meta": meta, "records": records}, indent=2) + "\n")
    with open(output_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(csv_rows(records))
    print(f"wrote {output_dir / 'results.json'} and results.csv")


def check_run(cfg: EvalMetaWorldConfig, patch: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run's journal identity (:meth:`EvalMetaWorldConfig.journal_identity`), checked before any work:
    :class:`~prismatic_tr.cli.BadInputError` when ``--output_dir`` journals another evaluation (with resume on), or
    when a ``patch`` (a benchmark script's change to modules of this process) would meet ``--workers`` above 1,
    whose spawned processes would run the model unpatched."""
    from prismatic_tr.policy.job_journal import JobJournal

    if patch is not None and cfg.workers > 1:
        raise BadInputError(f"--workers {cfg.workers} is not allowed with {dict(patch)}: the patch changes modules of "
                            "this process only, and spawned workers would run the model without it; give --workers 1")
    identity = cfg.journal_identity(patch)
    if cfg.resume:
        try:
            JobJournal.check(cfg.output_dir / JOURNAL, identity)
        except ValueError as err:
            raise BadInputError(str(err)) from None
    return identity


def run_eval_metaworld(cfg: EvalMetaWorldConfig, command: str,
                       patch: Mapping[str, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Load the policy, time and run every (setting, task) job not journaled yet (in ``cfg.workers`` processes),
    journaling each; return the records (one per setting, :func:`prismatic_tr.policy.metaworld.
    evaluate_metaworld_settings`) and the run's ``meta`` (``command``, provenance, journal, config, machine).
    ``patch``: what the calling benchmark script changes in the model for this run (:func:`check_run`), journaled
    in the identity and recorded in ``meta``. Bad input (:func:`check_run`, the checkpoint) is refused before any
    episode runs."""
    from tqdm.auto import tqdm

    from prismatic_tr.policy.job_journal import JobJournal
    from prismatic_tr.policy.metaworld import evaluate_metaworld_settings
    from prismatic_tr.policy.metaworld_workers import MetaWorldWorkers

    start = time.perf_counter()
    identity = check_run(cfg, patch)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    vla, processor = load_metaworld_policy(cfg)
    journal = JobJournal(cfg.output_dir / JOURNAL, identity, resume=cfg.resume)
    labels = [s.label for s in cfg.setting_list]
    reused = len(cfg.setting_list) * len(cfg.tasks) - len(journal.missing(labels, cfg.tasks))
    if reused:
        print(f"resuming: {reused} of {len(labels) * len(cfg.tasks)} (setting, task) jobs journaled in "
              f"{cfg.output_dir / JOURNAL} since {journal.started_utc} UTC are reused; every setting is timed again")
    bar = tqdm(total=cfg.episodes * len(cfg.tasks) * len(cfg.setting_list), initial=reused * cfg.episodes,
               desc="episodes", disable=not cfg.progress)
    with contextlib.ExitStack() as stack:
        workers = (stack.enter_context(MetaWorldWorkers(cfg.vla_path, cfg.workers)) if cfg.workers > 1 else None)
        records = evaluate_metaworld_settings(vla, processor, cfg.setting_list, cfg.tasks, cfg.split, cfg.episodes,
                                              cfg.unnorm_key, cfg.image_size, cfg.batch_size, cfg.execute_steps,
                                              cfg.timing_runs, on_episode=lambda label, o: bar.update(),
                                              workers=workers, on_job=journal.record, done=journal.done)
    bar.close()
    journal_meta = {"path": str(cfg.output_dir / JOURNAL), "started_utc": journal.started_utc,
                    "jobs_reused": reused, "jobs": len(labels) * len(cfg.tasks)}
    meta = run_meta(cfg, vla, command, journal_meta, time.perf_counter() - start)
    return records, meta if patch is None else {**meta, "patch": dict(patch)}


def run_meta(cfg: EvalMetaWorldConfig, vla: Any, command: str, journal: dict[str, Any],
             wall_s: float) -> dict[str, Any]:
    """The ``meta`` of ``results.json``: the command, the checkpoint's provenance, the journal, config and machine."""
    from prismatic_tr.bench.measure.devices import machine_info
    from prismatic_tr.policy.metaworld_records import provenance
    from prismatic_tr.policy.metaworld_workers import worker_threads

    return {"command": command, "model": str(cfg.vla_path), **provenance(cfg.vla_path), "split": cfg.split,
            "episodes_per_task": cfg.episodes, "journal": journal,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
            "dtype": str(next(vla.parameters()).dtype).removeprefix("torch."),
            "torch_threads": torch.get_num_threads(), "episode_workers": cfg.workers,
            "episode_worker_threads": worker_threads(cfg.workers) if cfg.workers > 1 else torch.get_num_threads(),
            "torch_version": torch.__version__, "machine": machine_info(), "wall_s": round(wall_s, 1)}


def check_metaworld_command(tasks: list[str], episodes: int, min_episodes: int, vla_path: Path) -> None:
    """The checks every MetaWorld measurement command makes before any work: each task one of MT10, ``--episodes``
    an integer >= ``min_episodes``, ``--vla_path`` a checkpoint directory (``ValueError`` naming the bad value)."""
    for task in tasks:
        metaworld_task(task)
    check_int_flag("episodes", episodes, min_episodes)
    check_checkpoint_dir("vla_path", vla_path)
