"""A torch ``IterableDataset`` of OpenVLA training examples streamed from an RLDS split.

Pipeline (tf.data, then Python)::

    episodes -> flat steps -> shard (rank i of n, step-wise) -> repeat (train) -> shuffle buffer
             -> decode the chosen image -> numpy -> ActionPromptTransform -> example dict

Use it with ``DataLoader(ds, batch_size=..., num_workers=0, collate_fn=PaddedCollator(...))``: tf.data reads
and decodes in its own threads, so the loader needs no worker processes (OpenVLA does the same).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset

from prismatic_tr.data.rlds import RLDSSource


class RLDSIterableDataset(IterableDataset):
    """Examples from ``source`` through ``transform``; infinite when ``train`` (repeats), one pass otherwise.

    Args:
        source: an opened :class:`RLDSSource` (keys validated).
        transform: step dict -> example dict (see ``ActionPromptTransform``).
        shuffle_buffer_size: steps held in tf.data's shuffle buffer (1 = no shuffling).
        rank, world_size: this process's share of the steps (step i goes to rank i % world_size).
        seed: shuffle seed; rank ``r`` uses ``seed + r``. The same seed gives the same order on every new
            iterator (tf.data would otherwise share one seed generator between datasets with equal seeds).
        skip: examples passed over first, before they are decoded (cheap): a resumed training run skips those the
            interrupted one used, and goes on with the order an unbroken run would have.
    """

    def __init__(
        self,
        source: RLDSSource,
        transform: Callable[[dict[str, Any]], dict[str, torch.Tensor]],
        train: bool = True,
        shuffle_buffer_size: int = 1000,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 7,
        skip: int = 0,
    ) -> None:
        super().__init__()
        if shuffle_buffer_size < 1:
            raise ValueError(f"shuffle_buffer_size={shuffle_buffer_size} must be >= 1")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        self.source, self.transform, self.train = source, transform, train
        if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
            raise ValueError(f"skip={skip!r} is not allowed; use an integer >= 0")
        self.shuffle_buffer_size, self.rank, self.world_size, self.seed = shuffle_buffer_size, rank, world_size, seed
        self.skip = skip

    def tf_dataset(self) -> Any:
        """The tf.data pipeline of decoded steps for this rank."""
        ds = self.source.step_dataset(shard=(self.rank, self.world_size))
        if self.train:
            ds = ds.repeat()
        if self.shuffle_buffer_size > 1:
            ds = ds.shuffle(self.shuffle_buffer_size, seed=self.seed + self.rank, reshuffle_each_iteration=False)
        if self.skip:
            ds = ds.skip(self.skip)
        return self.source.decode(ds).prefetch(2)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for step in self.tf_dataset().as_numpy_iterator():
            yield self.transform(step)
