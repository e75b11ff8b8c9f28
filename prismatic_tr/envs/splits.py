"""Seed splits of the tabletop task: one named, non-overlapping range of episode / scene seeds per use.

A seed makes a whole episode (scene, instruction, look) or a pretraining scene, so two jobs that draw from the
same seeds see the same layouts. Every job that picks seeds takes them from its split here, and
:func:`check_seeds` refuses a job whose seeds leave it (a ``ValueError`` naming the split they run into)::

    demonstrations              0 -   499,999   expert demonstrations (training data)
    vision_pretraining    500,000 -   999,999   scenes of the tower-pretraining frames (training data)
    validation          1,000,000 - 1,999,999   closed-loop episodes that choose: where to stop, settings, diagnoses
    offline             2,000,000 - 2,999,999   the scripted expert's steps for the offline action error
    test                3,000,000 - 3,999,999   held out: reported only, never read by training or a stopping decision

    from prismatic_tr.envs.splits import SPLITS, check_seeds, split_seeds
    seeds = split_seeds("test", 200)                    # range(3_000_000, 3_000_200)
    check_seeds("demonstrations", first=0, count=3000)  # the range, or ValueError if it leaves the split

Seeds from 4,000,000 on belong to no split. Knows nothing about models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SeedSplit:
    """Seeds ``first`` ... ``stop - 1`` for one use (``purpose``)."""

    name: str
    first: int
    stop: int
    purpose: str

    @property
    def seeds(self) -> range:
        return range(self.first, self.stop)

    def describe(self) -> str:
        return f"{self.name} ({self.first:,}-{self.stop - 1:,})"


DEMONSTRATIONS, VISION_PRETRAINING, VALIDATION, OFFLINE, TEST = (
    "demonstrations", "vision_pretraining", "validation", "offline", "test")
SPLITS: dict[str, SeedSplit] = {s.name: s for s in (
    SeedSplit(DEMONSTRATIONS, 0, 500_000, "expert demonstrations (training data)"),
    SeedSplit(VISION_PRETRAINING, 500_000, 1_000_000, "scenes of the tower-pretraining frames (training data)"),
    SeedSplit(VALIDATION, 1_000_000, 2_000_000,
              "closed-loop episodes that choose: where to stop, settings, diagnoses"),
    SeedSplit(OFFLINE, 2_000_000, 3_000_000, "the scripted expert's steps for the offline action error"),
    SeedSplit(TEST, 3_000_000, 4_000_000,
              "held-out closed-loop episodes: reported only, never read by training or a stopping decision"),
)}


def seed_split(name: str, splits: Mapping[str, SeedSplit] = SPLITS) -> SeedSplit:
    """The split called ``name`` of ``splits`` (default: the tabletop task's); ValueError naming the allowed names
    otherwise."""
    if name not in splits:
        raise ValueError(f"seed split {name!r} is not allowed; choose one of {list(splits)}")
    return splits[name]


def check_seeds(split: str, first: int, count: int, job: str | None = None,
                splits: Mapping[str, SeedSplit] = SPLITS) -> range:
    """Seeds ``first`` ... ``first + count - 1`` once checked to lie in ``split``.

    ValueError when they leave it, naming the splits they run into (or "no split") and, first, ``job`` (what
    chose the seeds, e.g. "--seed 5 with 1000 steps"), so that e.g. tower pretraining with ``--seed 5`` cannot
    draw the validation episodes' scenes. ``splits``: another task's splits (e.g. MetaWorld's,
    :mod:`prismatic_tr.envs.metaworld.splits`), which may leave gaps between them.
    """
    home = seed_split(split, splits)
    lead = f"{job} is not allowed: " if job else ""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"{lead}{count!r} {split} seeds are not allowed; use a count >= 1")
    seeds = range(first, first + count)
    if home.first <= seeds.start and seeds.stop <= home.stop:
        return seeds
    entered = [s for s in splits.values() if s is not home and s.first < seeds.stop and seeds.start < s.stop]
    covered = sum(min(s.stop, seeds.stop) - max(s.first, seeds.start) for s in [home, *entered]
                  if s.first < seeds.stop and seeds.start < s.stop)
    into = ", ".join([s.describe() for s in entered] + (["no split"] if covered < len(seeds) else []))
    raise ValueError(f"{lead}{split} seeds {seeds.start:,}-{seeds.stop - 1:,} leave the {home.describe()} split "
                     f"and overlap {into}; choose a first seed and count inside {home.describe()}")


def split_seeds(split: str, count: int, first: int | None = None, job: str | None = None,
                splits: Mapping[str, SeedSplit] = SPLITS) -> range:
    """``count`` seeds of ``split`` from ``first`` (default: the split's first seed), checked (:func:`check_seeds`)."""
    return check_seeds(split, seed_split(split, splits).first if first is None else first, count, job, splits)


def split_ranges(splits: Mapping[str, SeedSplit] = SPLITS) -> dict[str, tuple[int, int]]:
    """``{name: (first, last)}`` of every split (inclusive), for records."""
    return {s.name: (s.first, s.stop - 1) for s in splits.values()}
