"""Checks run before any training starts, so bad input fails fast with a message naming the problem.

Covered here (config-level checks live in ``FinetuneConfig.__post_init__``): the dataset directory, split
and step keys; the resume checkpoint; the vla_path; and whether a batch fits the data.

Batch rule: the data are sharded step-wise over the processes, so each process sees about
``num_transitions // world_size`` steps; ``batch_size`` must not exceed that, or every batch would hold
the same steps more than once. (Training repeats the data, so steps beyond one pass are fine.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prismatic_tr.data.rlds import RLDSSource
from prismatic_tr.data.statistics import compute_dataset_statistics, load_dataset_statistics
from prismatic_tr.training.checkpoint import load_trainer_state
from prismatic_tr.training.config import FinetuneConfig
from prismatic_tr.training.distributed import DistInfo, broadcast_object

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class DataPlan:
    source: RLDSSource
    stats: dict[str, Any]             # OpenVLA-format dataset statistics
    num_transitions: int


def check_vla_path(vla_path: str) -> None:
    """A local checkpoint directory with config.json, or a hub id (owner/name)."""
    path = Path(str(vla_path))
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ValueError(f"vla_path={str(vla_path)!r} is not a checkpoint directory (needs config.json)")
        return
    if not (_HUB_ID.match(str(vla_path)) and not os.path.isabs(str(vla_path))):
        raise ValueError(f"vla_path={str(vla_path)!r} does not exist and is not a Hugging Face model id (owner/name)")


def check_batch_fits(batch_size: int, world_size: int, num_transitions: int) -> None:
    per_rank = num_transitions // world_size
    if batch_size > per_rank:
        raise ValueError(
            f"batch_size={batch_size} does not fit: the split has {num_transitions} steps, "
            f"{per_rank} per process with {world_size} process(es); use batch_size <= {max(per_rank, 1)}"
            + (" or fewer processes" if world_size > 1 else "")
        )


def vla_action_statistics(vla_path: str, dataset_name: str) -> dict[str, Any]:
    """The action statistics ``vla_path`` normalises ``dataset_name`` with (its ``dataset_statistics.json``);
    ValueError naming the keys it has when it has none for that dataset."""
    path = Path(str(vla_path)) / "dataset_statistics.json"
    saved = load_dataset_statistics(path) if path.is_file() else {}
    if dataset_name not in saved:
        raise ValueError(f"norm_stats_from_vla=True needs action statistics for dataset {dataset_name!r} in "
                         f"{str(path)!r}; it has {sorted(saved)}")
    return saved[dataset_name]["action"]


def plan_data(cfg: FinetuneConfig, world_size: int) -> DataPlan:
    """Open and validate the dataset, get its statistics (from the resume checkpoint or the data; the action
    statistics from ``vla_path`` with ``norm_stats_from_vla``), check batch. ValueError with
    ``aggregate_data_roots``, which only an OpenVLA-OFT policy's data reads (:mod:`prismatic_tr.training.oft`)."""
    if cfg.aggregate_data_roots:
        raise ValueError(f"aggregate_data_roots={[str(r) for r in cfg.aggregate_data_roots]} trains several rounds "
                         "of an OpenVLA-OFT policy's data together; an OpenVLA policy trains on data_root_dir only: "
                         "omit it")
    source = RLDSSource(cfg.data_root_dir, cfg.dataset_name, cfg.split)
    stats: dict[str, Any] | None = None
    if cfg.resume_from is not None:
        load_trainer_state(Path(cfg.resume_from))
        saved = load_dataset_statistics(Path(cfg.resume_from))
        stats = saved if cfg.dataset_name in saved else None
    if stats is None:
        stats = compute_dataset_statistics(cfg.dataset_name, source.iter_actions(), source.num_episodes)
        if cfg.norm_stats_from_vla:
            stats[cfg.dataset_name]["action"] = vla_action_statistics(cfg.vla_path, cfg.dataset_name)
    n = int(stats[cfg.dataset_name]["num_transitions"])
    check_batch_fits(cfg.batch_size, world_size, n)
    return DataPlan(source, stats, n)


def shared_plan(cfg: FinetuneConfig, info: DistInfo, make_plan: Callable[[], DataPlan],
                 open_source: Callable[[], Any]) -> DataPlan:
    """Rank 0 validates the data and computes statistics once (``make_plan``); other ranks reuse them with their
    own ``open_source()``, or fail with rank 0."""
    if info.world_size == 1:
        return make_plan()
    plan, err = None, None
    if info.is_main:
        try:
            plan = make_plan()
        except ValueError as exc:
            err = str(exc)
    stats, err = broadcast_object((plan.stats if plan else None, err), info)
    if err is not None:
        raise ValueError(err)
    if plan is not None:
        return plan
    return DataPlan(open_source(), stats, int(stats[cfg.dataset_name]["num_transitions"]))
