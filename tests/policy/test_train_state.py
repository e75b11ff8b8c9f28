"""The training state's identity (``prismatic_tr.policy.train_state``): a run continues only under the flags that
trained it, and a flag added to the recipes after it was made counts as the value that trains as it did."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from prismatic_tr.policy.train_state import ADDED_LATER, load_train_state, save_train_state, training_identity


def _save(path: Path, identity: dict) -> None:
    model = torch.nn.Linear(2, 2)
    save_train_state(path, 3, model, torch.optim.AdamW(model.parameters()), [], {}, identity)


def test_a_state_made_before_a_flag_existed_continues_under_its_neutral_value_only(tmp_path: Path) -> None:
    old = {"learning_rate": 2e-4, "max_steps": 1500}   # saved before lora_rank and the on-policy flags
    _save(tmp_path / "state.pt", {**old, "autocast_resolved": False})
    now = training_identity({**old, "lora_rank": 0, "onpolicy_episodes": 0, "output_dir": "elsewhere"}, False)
    assert load_train_state(tmp_path / "state.pt", now)["step"] == 3
    with pytest.raises(ValueError, match="lora_rank: 0 there, 8 here"):
        load_train_state(tmp_path / "state.pt", {**now, "lora_rank": 8})
    with pytest.raises(ValueError, match="max_steps: 1500 there, 3000 here"):
        load_train_state(tmp_path / "state.pt", {**now, "max_steps": 3000})
    assert "proprio_slots" not in ADDED_LATER   # its default changed: absent means the old False, not today's True


def test_a_record_without_the_later_flags_is_the_same_training_as_one_with_their_neutral_values() -> None:
    old = {"learning_rate": 2e-4, "select_episodes": 10}
    assert training_identity(old, False) == training_identity({**old, **ADDED_LATER, "task_floor": 0.7,
                                                                "select_episodes": 5}, False)
    assert training_identity(old, False) != training_identity({**old, "onpolicy_episodes": 40}, False)
