"""OpenVLA-OFT training data from RLDS: each step with its action chunk, several cameras and the proprio state.

A step, after :meth:`OFTChunkSource.step_dataset` and :meth:`OFTChunkSource.decode`, is a dict of numpy values::

    {"images": [uint8 (H, W, 3) per camera: the primary one, then the wrist ones], "instruction": bytes,
     "state": float32 (P,), "actions": float32 (chunk, A): the step's action and the next chunk - 1 ones}

The chunk runs past the episode's end by repeating its last action, as OFT's data pipeline does (its
``chunk_act_obs`` clamps the future indices to the last step). Steps that carry their own ``action_chunk`` (episodes
relabelled by an OFT teacher, :mod:`prismatic_tr.policy.onpolicy`) give that chunk instead. :class:`OFTChunkTransform` turns a step into an
example (the cameras' pixel values concatenated on the channel axis, as at inference; proprio and actions
normalised with the dataset's statistics as OFT normalises them) and :class:`OFTCollator` pads a batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from prismatic_tr.data._tf import import_tf
from prismatic_tr.data.rlds import RLDSSource, _flatten_features, _get

WRIST_CANDIDATES = ("observation/wrist_image", "observation/image_wrist")
STATE_CANDIDATES = ("observation/state", "observation/proprio")
# an episode is chunked as one batch of its steps; tf.data reserves the whole batch size per episode, so it is
# bounded (LIBERO's longest demonstrations have ~500 steps, the tabletop task's at most 40)
MAX_EPISODE_STEPS = 2048


class OFTChunkSource:
    """One split of an RLDS dataset read for OFT training: ``num_images`` cameras (``observation/image`` first,
    then ``observation/wrist_image``), the state and ``chunk`` actions per step. ValueError, listing the step keys
    found, when a needed key is missing."""

    def __init__(self, data_root_dir: str | Path, dataset_name: str, split: str = "train", chunk: int = 8,
                 num_images: int = 2, action_dim: int = 7) -> None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk={chunk!r}; allowed: an integer >= 1")
        if num_images not in (1, 2):
            raise ValueError(f"num_images={num_images!r}; allowed: 1 (primary camera) or 2 (primary and wrist)")
        self.rlds = RLDSSource(data_root_dir, dataset_name, split, action_dim)
        self.chunk, self.num_images = chunk, num_images
        flat = _flatten_features(self.rlds.builder.info.features["steps"].feature)
        wrist = next((k for k in WRIST_CANDIDATES if k in flat), None)
        state = next((k for k in STATE_CANDIDATES if k in flat), None)
        missing = ([f"a wrist image (one of {list(WRIST_CANDIDATES)})"] if num_images == 2 and wrist is None else []) + \
                  ([f"the state (one of {list(STATE_CANDIDATES)})"] if state is None else [])
        if missing:
            raise ValueError(f"{self.rlds.version_dir} lacks {', '.join(missing)} for OFT training; step keys found: "
                             f"{sorted(flat)}")
        self.image_keys = [self.rlds.keys.image] + ([wrist] if num_images == 2 else [])
        self.state_key = state
        self.state_dim = int(flat[state].shape[0])
        self.chunk_key = "action_chunk" if "action_chunk" in flat else None
        if self.chunk_key is not None and tuple(flat["action_chunk"].shape) != (chunk, action_dim):
            raise ValueError(f"{self.rlds.version_dir} holds action chunks of shape {tuple(flat['action_chunk'].shape)}"
                             f"; this training takes ({chunk}, {action_dim})")

    @property
    def num_episodes(self) -> int:
        return self.rlds.num_episodes

    def _episodes(self) -> Any:
        return self.rlds.builder.as_dataset(split=self.rlds.split, decoders=self.rlds.skip_decoders or None,
                                            shuffle_files=False)

    def step_dataset(self, shard: tuple[int, int] = (0, 1)) -> Any:
        """tf.data.Dataset of steps (images still encoded), rank ``shard[0]`` of ``shard[1]``."""
        tf, _ = import_tf()
        keys, chunk, images, state_key = self.rlds.keys, self.chunk, self.image_keys, self.state_key

        own_chunks = self.chunk_key

        def select(step: dict[str, Any]) -> dict[str, Any]:
            out = {"images": tuple(_get(step, k) for k in images), "instruction": _get(step, keys.instruction),
                   "state": _get(step, state_key), "action": _get(step, keys.action)}
            return {**out, "actions": step[own_chunks]} if own_chunks else out

        def with_chunks(steps: dict[str, Any]) -> dict[str, Any]:
            n = tf.shape(steps["action"])[0]
            tf.debugging.assert_less(n, MAX_EPISODE_STEPS, message="an episode has too many steps for OFT chunking")
            index = tf.minimum(tf.range(n)[:, None] + tf.range(chunk)[None, :], n - 1)
            out = {k: v for k, v in steps.items() if k != "action"}
            return {**out, "actions": tf.gather(steps["action"], index)}

        if own_chunks:
            ds = self._episodes().flat_map(lambda ep: ep["steps"].map(select)).map(
                lambda s: {k: v for k, v in s.items() if k != "action"})
        else:  # one element per episode: its steps batched whole, chunked, then unbatched
            ds = self._episodes().flat_map(
                lambda ep: ep["steps"].map(select).batch(MAX_EPISODE_STEPS).map(with_chunks).unbatch())
        rank, world = shard
        return ds.shard(world, rank) if world > 1 else ds

    def decode(self, ds: Any) -> Any:
        """Map the encoded images of ``ds`` to uint8 (H, W, 3) tensors."""
        if not self.rlds.keys.image_is_encoded:
            return ds
        tf, _ = import_tf()

        def _dec(step: dict[str, Any]) -> dict[str, Any]:
            imgs = tuple(tf.io.decode_image(i, channels=3, expand_animations=False) for i in step["images"])
            return {**step, "images": imgs}

        return ds.map(_dec, num_parallel_calls=tf.data.AUTOTUNE)

    def iter_states(self, batch: int = 4096) -> Iterator[np.ndarray]:
        """All states of the split, in chunks of (<= batch, P) float32; images are never decoded."""
        key = self.state_key
        ds = self._episodes().flat_map(lambda ep: ep["steps"].map(lambda s: _get(s, key))).batch(batch)
        for part in ds.as_numpy_iterator():
            yield np.asarray(part, dtype=np.float32)


class OFTChunkSources:
    """Several :class:`OFTChunkSource` read as one (DAgger's aggregation: every round's episodes train together):
    their steps one after another, for the training pipeline's shuffle to mix. ValueError when they differ in what
    a step holds (cameras encoded or not, state size)."""

    def __init__(self, sources: Sequence[OFTChunkSource]) -> None:
        if not sources:
            raise ValueError("OFTChunkSources needs at least one source")
        first = sources[0]
        for other in sources[1:]:
            if (other.rlds.keys.image_is_encoded, other.state_dim, len(other.image_keys)) != \
                    (first.rlds.keys.image_is_encoded, first.state_dim, len(first.image_keys)):
                raise ValueError(f"{other.rlds.version_dir} cannot train beside {first.rlds.version_dir}: its steps "
                                 f"differ (encoded images {other.rlds.keys.image_is_encoded} vs "
                                 f"{first.rlds.keys.image_is_encoded}, state {other.state_dim} vs {first.state_dim}, "
                                 f"cameras {len(other.image_keys)} vs {len(first.image_keys)})")
        self.sources = list(sources)

    @property
    def num_episodes(self) -> int:
        return sum(s.num_episodes for s in self.sources)

    def step_dataset(self, shard: tuple[int, int] = (0, 1)) -> Any:
        """The sources' steps (as :meth:`OFTChunkSource.step_dataset`), one source after another."""
        ds = self.sources[0].step_dataset(shard)
        for source in self.sources[1:]:
            ds = ds.concatenate(source.step_dataset(shard))
        return ds

    def decode(self, ds: Any) -> Any:
        return self.sources[0].decode(ds)


def oft_statistics(source: OFTChunkSource | OFTChunkSources, dataset_name: str) -> dict[str, Any]:
    """OFT's ``dataset_statistics.json`` content for the split (of every source, aggregated): OpenVLA's action block
    (gripper not normalised) plus a ``"proprio"`` block (every dimension normalised)."""
    from prismatic_tr.data.statistics import action_statistics

    parts = source.sources if isinstance(source, OFTChunkSources) else [source]
    actions = np.concatenate([a for part in parts for a in part.rlds.iter_actions()], 0)
    states = np.concatenate([x for part in parts for x in part.iter_states()], 0)
    return {dataset_name: {"action": action_statistics(actions), "proprio": action_statistics(states,
                                                                                              [True] * states.shape[1]),
                           "num_transitions": int(actions.shape[0]), "num_trajectories": source.num_episodes}}


class OFTChunkTransform:
    """Callable: a step of :class:`OFTChunkSource` -> example {"pixel_values": (n * C, H, W) float, "input_ids":
    (L,) long (the prompt with BOS), "proprio": (P,) float32, "actions": (chunk, A) float32}, normalised as OFT
    trains (``normalization`` "bounds_q99" or "bounds": actions and proprio to [-1, 1] by the statistics, the
    action mask respected). Each camera goes through ``processor(prompt, image)`` as at inference."""

    def __init__(self, processor: Any, stats: Mapping[str, Any], normalization: str = "bounds_q99",
                 image_aug: Any = None) -> None:
        from prismatic_tr.models.oft import normalize_oft_actions, normalize_oft_proprio

        self.processor, self.image_aug, self.normalization = processor, image_aug, normalization
        self.action_stats, self.proprio_stats = dict(stats["action"]), dict(stats["proprio"])
        self._actions, self._proprio = normalize_oft_actions, normalize_oft_proprio

    def __call__(self, step: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        from prismatic_tr.models.tokenizer import build_prompt

        text = step["instruction"]
        prompt = build_prompt(text.decode("utf-8") if isinstance(text, bytes) else str(text))
        pixels, ids = [], None
        for frame in step["images"]:
            image = Image.fromarray(np.asarray(frame, dtype=np.uint8))
            if self.image_aug is not None:
                image = self.image_aug(image)
            enc = self.processor(prompt, image, return_tensors="pt")
            ids = enc["input_ids"][0] if ids is None else ids
            pixels.append(torch.as_tensor(enc["pixel_values"])[0])
        proprio = self._proprio(np.asarray(step["state"], dtype=np.float64), self.proprio_stats, self.normalization)
        actions = self._actions(np.asarray(step["actions"], dtype=np.float64), self.action_stats, self.normalization)
        return {"pixel_values": torch.cat(pixels, dim=0), "input_ids": torch.as_tensor(ids, dtype=torch.long),
                "proprio": torch.as_tensor(proprio, dtype=torch.float32),
                "actions": torch.as_tensor(actions, dtype=torch.float32)}


@dataclass
class OFTCollator:
    """Examples -> batch {"pixel_values" (B, n * C, H, W), "input_ids" (B, L) right-padded with ``pad_token_id``,
    "attention_mask" (B, L) bool, "proprio" (B, P), "actions" (B, chunk, A)}."""

    pad_token_id: int

    def __call__(self, examples: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        width = max(int(e["input_ids"].shape[0]) for e in examples)
        ids = torch.full((len(examples), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(examples), width), dtype=torch.bool)
        for row, e in enumerate(examples):
            n = int(e["input_ids"].shape[0])
            ids[row, :n], mask[row, :n] = e["input_ids"], True
        stack = lambda key: torch.stack([e[key] for e in examples])  # noqa: E731
        return {"pixel_values": stack("pixel_values"), "input_ids": ids, "attention_mask": mask,
                "proprio": stack("proprio"), "actions": stack("actions")}
