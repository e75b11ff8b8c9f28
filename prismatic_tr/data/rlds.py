"""Reading RLDS episodes (tensorflow-datasets) from ``data_root_dir/dataset_name`` into flat steps.

A step, after :meth:`RLDSSource.steps`, is a dict of numpy values::

    {"image": uint8 (H, W, 3), "instruction": bytes, "action": float32 (A,)}

Keys are found in the usual OpenVLA / Open X-Embodiment layouts (first match wins, see ``*_CANDIDATES``);
a dataset without them fails in :meth:`RLDSSource.open` with the keys it does have.
tensorflow is imported only inside functions, after torch (see ``_tf.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prismatic_tr.data._tf import import_tf

IMAGE_CANDIDATES = ("observation/image", "observation/image_primary", "observation/rgb")
INSTRUCTION_CANDIDATES = (
    "language_instruction",
    "observation/natural_language_instruction",
    "observation/language_instruction",
)
ACTION_CANDIDATES = ("action",)


def find_version_dir(data_root_dir: str | Path, dataset_name: str) -> Path:
    """``data_root_dir/dataset_name/<newest version>`` (or the dataset dir itself if it holds the files)."""
    ds_dir = Path(data_root_dir) / dataset_name
    if not ds_dir.is_dir():
        found = sorted(p.name for p in Path(data_root_dir).iterdir() if p.is_dir()) if Path(data_root_dir).is_dir() else None
        where = f"{data_root_dir!s} holds {found}" if found is not None else f"{data_root_dir!s} does not exist"
        raise ValueError(f"dataset directory {ds_dir} not found ({where}); check --data_root_dir/--dataset_name")
    if (ds_dir / "dataset_info.json").is_file():
        return ds_dir
    versions = [p for p in ds_dir.iterdir() if p.is_dir() and (p / "dataset_info.json").is_file()]
    if not versions:
        raise ValueError(f"{ds_dir} holds no tensorflow-datasets version directory (no */dataset_info.json)")
    return max(versions, key=lambda p: tuple(int(x) if x.isdigit() else 0 for x in p.name.split(".")))


def _flatten_features(feature: Any, prefix: str = "") -> dict[str, Any]:
    """Nested tfds FeaturesDict -> {"a/b/c": leaf feature}."""
    out: dict[str, Any] = {}
    for key, sub in feature.items():
        path = f"{prefix}{key}"
        if hasattr(sub, "items") and not hasattr(sub, "feature"):
            out.update(_flatten_features(sub, path + "/"))
        else:
            out[path] = sub
    return out


def _pick(keys: dict[str, Any], candidates: tuple[str, ...]) -> str | None:
    return next((c for c in candidates if c in keys), None)


@dataclass
class StepKeys:
    """The step-level feature paths used for the image, the instruction and the action."""

    image: str
    instruction: str
    action: str
    image_is_encoded: bool
    action_dim: int


def resolve_step_keys(step_features: dict[str, Any], action_dim: int = 7) -> StepKeys:
    """Find the needed keys among ``step_features`` (flattened); ValueError listing what is there if not."""
    image, text, action = (_pick(step_features, c) for c in (IMAGE_CANDIDATES, INSTRUCTION_CANDIDATES, ACTION_CANDIDATES))
    missing = [
        f"{what} (one of {list(cands)})"
        for what, key, cands in (
            ("image", image, IMAGE_CANDIDATES),
            ("language instruction", text, INSTRUCTION_CANDIDATES),
            ("action", action, ACTION_CANDIDATES),
        )
        if key is None
    ]
    if missing:
        raise ValueError(f"the dataset's steps lack {', '.join(missing)}; step keys found: {sorted(step_features)}")
    shape = tuple(getattr(step_features[action], "shape", ()) or ())
    if len(shape) != 1 or shape[0] != action_dim:
        raise ValueError(f"steps/{action} must have shape ({action_dim},), found {shape or type(step_features[action]).__name__}")
    img_shape = tuple(getattr(step_features[image], "shape", ()) or ())
    if len(img_shape) != 3 or img_shape[-1] != 3:
        raise ValueError(f"steps/{image} must be an (H, W, 3) image, found shape {img_shape}")
    encoded = type(step_features[image]).__name__ == "Image"
    return StepKeys(image, text, action, encoded, action_dim)


def _get(step: dict[str, Any], path: str) -> Any:
    for part in path.split("/"):
        step = step[part]
    return step


class RLDSSource:
    """One split of an RLDS dataset on disk: validated keys, sizes, and tf.data pipelines over its steps."""

    def __init__(self, data_root_dir: str | Path, dataset_name: str, split: str = "train", action_dim: int = 7):
        self.dataset_name, self.split = dataset_name, split
        self.version_dir = find_version_dir(data_root_dir, dataset_name)
        self.keys, self.num_episodes, self.skip_decoders = self._open(action_dim)

    def _open(self, action_dim: int) -> tuple[StepKeys, int, dict[str, Any]]:
        _, tfds = import_tf()
        self.builder = tfds.builder_from_directory(str(self.version_dir))
        splits = self.builder.info.splits
        if self.split not in splits:
            raise ValueError(f"split {self.split!r} not in dataset {self.dataset_name!r}; splits: {sorted(splits)}")
        top = self.builder.info.features
        if "steps" not in top:
            raise ValueError(f"{self.version_dir} is not RLDS: no 'steps' feature; top-level keys: {sorted(top)}")
        flat = _flatten_features(top["steps"].feature)
        keys = resolve_step_keys(flat, action_dim)
        # Keep every image encoded while reading; only the chosen one is decoded, after shuffling.
        skip: dict[str, Any] = {}
        for path, feat in flat.items():
            if type(feat).__name__ == "Image":
                node = skip
                *parents, leaf = path.split("/")
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = tfds.decode.SkipDecoding()
        return keys, int(splits[self.split].num_examples), {"steps": skip} if skip else {}

    def step_dataset(self, shard: tuple[int, int] = (0, 1)) -> Any:
        """tf.data.Dataset of {"image" (encoded or uint8), "instruction", "action"}, rank ``shard[0]`` of ``shard[1]``."""
        keys = self.keys
        episodes = self.builder.as_dataset(split=self.split, decoders=self.skip_decoders or None, shuffle_files=False)

        def select(step: dict[str, Any]) -> dict[str, Any]:
            return {"image": _get(step, keys.image), "instruction": _get(step, keys.instruction), "action": _get(step, keys.action)}

        ds = episodes.flat_map(lambda ep: ep["steps"].map(select))
        rank, world = shard
        return ds.shard(world, rank) if world > 1 else ds

    def decode(self, ds: Any) -> Any:
        """Map encoded images of ``ds`` to uint8 (H, W, 3) tensors (no-op for raw tensors)."""
        if not self.keys.image_is_encoded:
            return ds
        tf, _ = import_tf()

        def _dec(step: dict[str, Any]) -> dict[str, Any]:
            img = tf.io.decode_image(step["image"], channels=3, expand_animations=False)
            return {**step, "image": img}

        return ds.map(_dec, num_parallel_calls=tf.data.AUTOTUNE)

    def iter_actions(self, batch: int = 4096) -> Iterator[np.ndarray]:
        """All actions of the split, in chunks of (<= batch, A) float32; images are never decoded."""
        ds = self.step_dataset().map(lambda s: s["action"]).batch(batch)
        for chunk in ds.as_numpy_iterator():
            yield np.asarray(chunk, dtype=np.float32)

    def num_transitions(self) -> int:
        """Steps in the split (one pass over the actions; images are not decoded)."""
        return sum(len(c) for c in self.iter_actions())
