"""Action statistics of an RLDS split, in OpenVLA's ``dataset_statistics.json`` format.

    {dataset_name: {"action": {"mean", "std", "max", "min", "q01", "q99", "mask"},   # lists of A floats/bools
                    "num_transitions": int, "num_trajectories": int}}

``mask`` says which dimensions are normalised; by default all but the last (the gripper), as OpenVLA does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

STATS_FILENAME = "dataset_statistics.json"


# follows OpenVLA c8f03f48 prismatic/vla/datasets/rlds/utils/data_utils.py (MIT, see NOTICE): the
# dataset_statistics.json fields and the gripper mask, so norm_stats are interchangeable.
def action_statistics(actions: np.ndarray, mask: Sequence[bool] | None = None) -> dict[str, list[Any]]:
    """(T, A) actions -> {"mean", "std", "max", "min", "q01", "q99", "mask"} (lists of length A)."""
    actions = np.asarray(actions, dtype=np.float64)
    if actions.ndim != 2 or actions.shape[0] == 0:
        raise ValueError(f"actions must be a non-empty (T, A) array, got shape {actions.shape}")
    a_dim = actions.shape[1]
    if mask is None:
        mask = [True] * (a_dim - 1) + [False]
    if len(mask) != a_dim:
        raise ValueError(f"mask has {len(mask)} entries; the actions have {a_dim} dimensions")
    return {
        "mean": actions.mean(0).tolist(),
        "std": actions.std(0).tolist(),
        "max": actions.max(0).tolist(),
        "min": actions.min(0).tolist(),
        "q01": np.quantile(actions, 0.01, axis=0).tolist(),
        "q99": np.quantile(actions, 0.99, axis=0).tolist(),
        "mask": [bool(m) for m in mask],
    }


def compute_dataset_statistics(
    dataset_name: str, action_chunks: Iterable[np.ndarray], num_trajectories: int, mask: Sequence[bool] | None = None
) -> dict[str, Any]:
    """OpenVLA-format statistics of one dataset from its actions (an iterable of (t, A) chunks)."""
    chunks = [np.asarray(c) for c in action_chunks]
    actions = np.concatenate(chunks, 0) if chunks else np.zeros((0, 0))
    return {
        dataset_name: {
            "action": action_statistics(actions, mask),
            "num_transitions": int(actions.shape[0]),
            "num_trajectories": int(num_trajectories),
        }
    }


def save_dataset_statistics(stats: dict[str, Any], out_dir: str | Path) -> Path:
    """Write ``stats`` as ``out_dir/dataset_statistics.json``; returns the path."""
    path = Path(out_dir) / STATS_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stats, indent=2))
    return path


def load_dataset_statistics(path: str | Path) -> dict[str, Any]:
    """Read a ``dataset_statistics.json`` (a file, or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / STATS_FILENAME
    if not path.is_file():
        raise ValueError(f"no dataset statistics at {path}")
    return json.loads(path.read_text())
