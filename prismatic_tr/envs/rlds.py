"""Recorded episodes of the tabletop task as RLDS (tensorflow-datasets), in OpenVLA's layout.

One dataset example per episode::

    {"steps": Dataset({
        "observation": {"image": Image (224, 224, 3) uint8 (PNG, lossless),
                        "state": Tensor (4,) float32: effector x, y, z (metres), gripper open (1) / closed (0)},
        "language_instruction": Text,
        "action": Tensor (7,) float32: the expert's action at this observation (spec.py: units, bounds),
        "reward": float32 (1 on the step that succeeds), "discount": float32 (1),
        "is_first", "is_last", "is_terminal": bool (terminal: the episode ended by success or failure)}),
     "episode_metadata": {"seed": int64, "success": bool, "outcome": Text, "kind": Text, "target": Text}}

Step t holds the observation before action t; the image after the last action is not stored.
:class:`prismatic_tr.data.RLDSSource` reads it (``observation/image``, ``language_instruction``, ``action``).

Episodes recorded with the third-person camera (OpenVLA-OFT-style data, ``third_person=True``) are written in the
layout of OFT's LIBERO datasets instead: ``observation/image`` is the third-person view (the primary camera) and
``observation/wrist_image`` the eye-in-hand one; ``observation/state`` as above. Episodes relabelled by an OFT
teacher (:mod:`prismatic_tr.policy.onpolicy`) also hold ``action_chunk`` (chunk, 7) float32 per step: the teacher's
whole chunk there, which OFT training reads instead of the next actions.

MetaWorld episodes (:mod:`prismatic_tr.envs.metaworld`) are written the same way (third-person layout, states given
as arrays of ``state_dim``, (7,) with the goal, frames of ``image_size``); their ``kind`` is the task's name and
``target`` the goal vector as text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from prismatic_tr.envs.env import SUCCESS, WRONG_OBJECT, EnvState
from prismatic_tr.envs.rollout import EpisodeResult
from prismatic_tr.envs.spec import ACTION_DIM, IMAGE_SIZE

STATE_DIM = 4   # the tabletop task's state (module docstring); other environments pass their own state_dim


WRIST_IMAGE = "wrist_image"  # the eye-in-hand camera's key in third-person datasets (OFT's LIBERO layout)


def rlds_features(tfds: Any, third_person: bool = False, chunk: int | None = None,
                  image_size: int = IMAGE_SIZE, state_dim: int = STATE_DIM) -> Any:
    """The dataset's ``tfds.features.FeaturesDict`` (see the module docstring); frames ``image_size`` square,
    states of ``state_dim``."""
    f = tfds.features
    flag = lambda: f.Tensor(shape=(), dtype=np.bool_)  # noqa: E731
    scalar = lambda: f.Tensor(shape=(), dtype=np.float32)  # noqa: E731
    image = lambda: f.Image(shape=(image_size, image_size, 3), encoding_format="png")  # noqa: E731
    observation = {"image": image(), "state": f.Tensor(shape=(state_dim,), dtype=np.float32)}
    if third_person:
        observation[WRIST_IMAGE] = image()
    step = {
        "observation": f.FeaturesDict(observation),
        "language_instruction": f.Text(),
        "action": f.Tensor(shape=(ACTION_DIM,), dtype=np.float32),
        **({"action_chunk": f.Tensor(shape=(chunk, ACTION_DIM), dtype=np.float32)} if chunk else {}),
        "reward": scalar(),
        "discount": scalar(),
        "is_first": flag(),
        "is_last": flag(),
        "is_terminal": flag(),
    }
    metadata = {
        "seed": f.Tensor(shape=(), dtype=np.int64),
        "success": flag(),
        "outcome": f.Text(),
        "kind": f.Text(),
        "target": f.Text(),
    }
    return f.FeaturesDict({"steps": f.Dataset(step), "episode_metadata": f.FeaturesDict(metadata)})


def state_vector(state: EnvState | np.ndarray) -> np.ndarray:
    """(4,) float32: effector x, y, z and gripper open (1.0) / closed (0.0); a 1-D array (MetaWorld's) as is."""
    if isinstance(state, np.ndarray):
        return state.astype(np.float32).reshape(-1)
    return np.array([*state.effector, float(state.gripper_open)], dtype=np.float32)


def observation(image: np.ndarray, state: EnvState | np.ndarray, third_person: np.ndarray | None) -> dict[str, np.ndarray]:
    """One step's observation: the eye-in-hand image as ``image``, or, with a third-person image, that one as
    ``image`` and the eye-in-hand one as ``wrist_image`` (OFT's LIBERO layout)."""
    if third_person is None:
        return {"image": image, "state": state_vector(state)}
    return {"image": third_person, WRIST_IMAGE: image, "state": state_vector(state)}


def episode_example(result: EpisodeResult, state_dim: int = STATE_DIM) -> dict[str, Any]:
    """A recorded :class:`EpisodeResult` (``rollout(..., record=True)``) as one RLDS example (states of
    ``state_dim``: ValueError otherwise)."""
    n = len(result.actions)
    if n == 0 or not (len(result.images) == len(result.states) == n):
        raise ValueError(f"episode {result.seed} was not recorded step by step (rollout(..., record=True))")
    sizes = {state_vector(s).shape[0] for s in result.states}
    if sizes != {state_dim}:
        raise ValueError(f"episode {result.seed} has states of size {sorted(sizes)}; the dataset holds {state_dim}")
    third = result.third_person_images or [None] * n
    chunks = result.action_chunks or [None] * n
    if len(third) != n or len(chunks) != n:
        raise ValueError(f"episode {result.seed} has {len(third)} third-person images and {len(chunks)} action "
                         f"chunks for {n} steps")
    terminal = result.outcome in (SUCCESS, WRONG_OBJECT)
    steps = [
        {
            "observation": observation(image, state, top),
            "language_instruction": result.instruction,
            "action": np.asarray(action, dtype=np.float32),
            **({"action_chunk": np.asarray(c, dtype=np.float32)} if c is not None else {}),
            "reward": np.float32(t == n - 1 and result.success),
            "discount": np.float32(1.0),
            "is_first": t == 0,
            "is_last": t == n - 1,
            "is_terminal": t == n - 1 and terminal,
        }
        for t, (image, action, state, top, c) in enumerate(zip(result.images, result.actions, result.states, third,
                                                               chunks, strict=True))
    ]
    metadata = {"seed": result.seed, "success": result.success, "outcome": result.outcome, "kind": result.kind,
                "target": result.target}
    return {"steps": steps, "episode_metadata": metadata}


def write_episodes(
    root: str | Path,
    name: str,
    splits: Mapping[str, Callable[[], Iterable[EpisodeResult]]],
    description: str = "",
    third_person: bool = False,
    chunk: int | None = None,
    image_size: int = IMAGE_SIZE,
    state_dim: int = STATE_DIM,
) -> Path:
    """Write episodes as the RLDS dataset ``root/name/1.0.0``; returns that directory.

    ``splits`` maps a split name to a callable yielding recorded results (``rollout(..., record=True)``) one
    episode at a time, so no more than one episode is held in memory; they are stored in that order.
    ``third_person``: the episodes were recorded with the third-person camera (OFT's layout, module docstring);
    ``chunk``: they hold a teacher's ``action_chunks`` of that length; ``image_size``: their frames' size;
    ``state_dim``: their states' size (the tabletop task's 4 by default).
    """
    from prismatic_tr.data.writer import write_tfds_dataset  # imports torch, then tensorflow lazily

    def examples(make: Callable[[], Iterable[EpisodeResult]]) -> Callable[[], Iterable[tuple[str, dict]]]:
        # keys sort in the order written (tensorflow-datasets 4.9.3 stores examples sorted by key even with shuffling
        # disabled) and stay unique across kinds (a MetaWorld dataset holds several tasks with the same seeds)
        return lambda: ((f"{i:09d}_{r.kind}_seed_{r.seed}", episode_example(r, state_dim)) for i, r in enumerate(make()))

    features = lambda tfds: rlds_features(tfds, third_person, chunk, image_size, state_dim)  # noqa: E731
    return write_tfds_dataset(root, name, features, {s: examples(m) for s, m in splits.items()},
                              description=description, keep_order=True)
