"""A tiny synthetic RLDS dataset written offline with tensorflow-datasets (tests, examples, smoke runs).

Layout (OpenVLA / Open X-Embodiment style)::

    root/dataset_name/1.0.0/{dataset_info.json, features.json, <name>-<split>.tfrecord-*}
    episode = {"steps": Dataset({"observation": {image_key: Image (S, S, 3) uint8},
                                 "language_instruction": Text,          # or observation/<key>
                                 "action": Tensor (action_dim,) float32})}

The action of a step is a smooth function of its episode and step index (first dims in roughly
[-0.05, 0.05], last dim a 0/1 gripper), and each episode's image has its own base colour, so a model
can fit the data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prismatic_tr.data.writer import DEFAULT_VERSION, write_tfds_dataset

INSTRUCTIONS = ("pick up the red block", "open the drawer", "push the cup to the left", "close the lid")


@dataclass(frozen=True)
class SyntheticRLDSSpec:
    """What to write. ``instruction_key`` "observation/<name>" puts the text inside the observation;
    None omits it, and ``action_key`` None omits the action (to test datasets lacking needed keys)."""

    dataset_name: str = "tiny_rlds"
    num_episodes: int = 6
    steps_per_episode: int = 8
    image_size: int = 64
    image_key: str = "image"
    instruction_key: str | None = "language_instruction"
    action_key: str | None = "action"
    action_dim: int = 7
    splits: tuple[str, ...] = ("train",)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_episodes", "steps_per_episode", "image_size", "action_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if not self.splits:
            raise ValueError("splits must name at least one split, e.g. ('train',)")


def _episode(spec: SyntheticRLDSSpec, split_idx: int, ep: int) -> dict[str, Any]:
    """One episode as the nested dict tfds expects; deterministic in (seed, split, episode)."""
    rng = np.random.default_rng(spec.seed * 1000 + split_idx * 100 + ep)
    s, n, a_dim = spec.image_size, spec.steps_per_episode, spec.action_dim
    base = rng.integers(0, 256, size=3)
    phase = rng.uniform(0, 2 * np.pi, size=a_dim)
    steps = []
    for t in range(n):
        img = np.clip(base + rng.integers(-20, 21, size=(s, s, 3)), 0, 255).astype(np.uint8)
        img[: s // 4, : s // 4] = (t * 255) // max(n - 1, 1)  # step index visible in a corner
        action = (0.05 * np.sin(phase + 0.4 * t)).astype(np.float32)
        action[-1] = float(t >= n // 2)  # gripper closes half-way
        step: dict[str, Any] = {"observation": {spec.image_key: img}}
        if spec.action_key is not None:
            step[spec.action_key] = action
        text = INSTRUCTIONS[ep % len(INSTRUCTIONS)]
        if spec.instruction_key is not None:
            if spec.instruction_key.startswith("observation/"):
                step["observation"][spec.instruction_key.split("/", 1)[1]] = text
            else:
                step[spec.instruction_key] = text
        steps.append(step)
    return {"steps": steps}


def _features(spec: SyntheticRLDSSpec, tfds: Any) -> Any:
    obs: dict[str, Any] = {spec.image_key: tfds.features.Image(shape=(spec.image_size, spec.image_size, 3))}
    step: dict[str, Any] = {}
    if spec.action_key is not None:
        step[spec.action_key] = tfds.features.Tensor(shape=(spec.action_dim,), dtype=np.float32)
    if spec.instruction_key is not None:
        if spec.instruction_key.startswith("observation/"):
            obs[spec.instruction_key.split("/", 1)[1]] = tfds.features.Text()
        else:
            step[spec.instruction_key] = tfds.features.Text()
    step["observation"] = tfds.features.FeaturesDict(obs)
    return tfds.features.FeaturesDict({"steps": tfds.features.Dataset(step)})


def write_synthetic_rlds(root: str | Path, spec: SyntheticRLDSSpec | None = None) -> Path:
    """Write ``spec``'s dataset under ``root/spec.dataset_name`` (skipped if it exists); returns the version dir."""
    spec = spec or SyntheticRLDSSpec()
    version_dir = Path(root) / spec.dataset_name / DEFAULT_VERSION
    if (version_dir / "dataset_info.json").is_file():
        return version_dir

    def split_examples(split_idx: int) -> Callable[[], Iterator[tuple[str, dict[str, Any]]]]:
        return lambda: ((f"{split_idx}_{ep}", _episode(spec, split_idx, ep)) for ep in range(spec.num_episodes))

    splits = {name: split_examples(i) for i, name in enumerate(spec.splits)}
    return write_tfds_dataset(root, spec.dataset_name, lambda tfds: _features(spec, tfds), splits)
