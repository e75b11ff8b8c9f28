"""Seed splits of the tabletop task (prismatic_tr.envs.splits): one non-overlapping range per use, and every job
that picks seeds refuses seeds outside its split."""

from __future__ import annotations

import pytest

from prismatic_tr.envs.splits import SPLITS, check_seeds, seed_split, split_ranges, split_seeds


def test_splits_are_the_documented_ranges_and_do_not_overlap() -> None:
    assert split_ranges() == {"demonstrations": (0, 499_999), "vision_pretraining": (500_000, 999_999),
                              "validation": (1_000_000, 1_999_999), "offline": (2_000_000, 2_999_999),
                              "test": (3_000_000, 3_999_999)}
    ordered = sorted(SPLITS.values(), key=lambda s: s.first)
    assert all(a.stop <= b.first for a, b in zip(ordered[:-1], ordered[1:], strict=True))


@pytest.mark.parametrize("split, first, count, enters", [
    ("vision_pretraining", 500_000 + 5 * 100_000, 1000 * 4, "validation (1,000,000-1,999,999)"),  # --seed 5
    ("demonstrations", 499_000, 3000, "vision_pretraining (500,000-999,999)"),
    ("validation", 1_999_990, 20, "offline (2,000,000-2,999,999)"),
    ("validation", 999_999, 2, "vision_pretraining (500,000-999,999)"),
    ("test", 3_999_990, 20, "no split"),
    ("demonstrations", -1, 2, "no split"),
    ("offline", 0, 10, "demonstrations (0-499,999)"),
])
def test_seeds_that_leave_their_split_are_refused_naming_the_split_entered(
        split: str, first: int, count: int, enters: str) -> None:
    with pytest.raises(ValueError) as err:
        check_seeds(split, first, count, job="--my_flag 3")
    message = str(err.value)
    assert message.startswith(f"--my_flag 3 is not allowed: {split} seeds ") and f" leave the {split} (" in message
    assert message.split(" split and overlap ")[1].startswith(enters)


def test_seeds_inside_their_split_pass() -> None:
    assert check_seeds("demonstrations", 0, 500_000) == range(0, 500_000)
    assert split_seeds("test", 200) == range(3_000_000, 3_000_200)
    assert split_seeds("validation", 3, first=1_000_010) == range(1_000_010, 1_000_013)
    with pytest.raises(ValueError, match="use a count >= 1"):
        split_seeds("test", 0)
    with pytest.raises(ValueError, match=r"seed split 'train' is not allowed; choose one of \['demonstrations'"):
        seed_split("train")


def test_every_seed_picker_uses_its_split() -> None:
    from prismatic_tr.envs.demos import DemoConfig
    from prismatic_tr.policy.fidelity import EVAL_SEED, OFFLINE_SEED
    from prismatic_tr.policy.vision_pretrain import FRAME_SEED_OFFSET, scene_seeds

    assert (EVAL_SEED, OFFLINE_SEED, FRAME_SEED_OFFSET) == (1_000_000, 2_000_000, 500_000)
    assert scene_seeds(0, 1000, 32) == range(500_000, 504_000)  # the recipe's 1000 steps x batch 32 (4 scenes each)
    assert scene_seeds(4, 1000, 33) == range(900_000, 905_000)  # 33 frames: 5 scenes a step
    with pytest.raises(ValueError, match="overlap vision_pretraining"):
        DemoConfig(num_episodes=2, num_val_episodes=1, seed=499_998)
    assert DemoConfig(num_episodes=2, seed=499_998).split_seeds()["train"] == range(499_998, 500_000)
