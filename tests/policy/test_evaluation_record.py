"""An evaluation record names each episode's outcome: its seeds and failed seeds read back episode by episode."""

from __future__ import annotations

import pytest

from prismatic_tr.policy.closed_loop import EpisodeOutcome, evaluation_record, record_successes


def outcomes(first: int, ends: str) -> list[EpisodeOutcome]:
    """One episode per letter from seed ``first``: s success, t timeout, w wrong object."""
    names = {"s": "success", "t": "timeout", "w": "wrong_object"}
    return [EpisodeOutcome(first + i, "pick the cube", names[c], 10 + i) for i, c in enumerate(ends)]


def test_a_record_gives_back_every_episodes_outcome() -> None:
    record = evaluation_record(outcomes(3_000_000, "stswss"), split="test")
    assert record_successes(record) == {3_000_000: True, 3_000_001: False, 3_000_002: True, 3_000_003: False,
                                        3_000_004: True, 3_000_005: True}
    legacy = {**record, "failed_seeds": [3_000_001, 3_000_003]}   # one list, as the older records hold
    assert record_successes(legacy) == record_successes(record)


@pytest.mark.parametrize("change, match", [
    ({"episodes": 7}, "consecutive seeds"),                              # more episodes than the seeds span
    ({"failed_seeds": {"timeout": [2_999_999]}, "successes": 5}, "outside the record's seeds"),
    ({"successes": 3}, "counts 3 successes"),                            # the counts disagree with the seeds
])
def test_a_record_that_cannot_name_its_episodes_is_refused(change: dict, match: str) -> None:
    record = {**evaluation_record(outcomes(3_000_000, "stswss")), **change}
    with pytest.raises(ValueError, match=match):
        record_successes(record)
