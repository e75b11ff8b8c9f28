"""Resuming an OFT recipe's training where it stopped (a 2-core run of hours may be cut off: a session's end, a
reboot, a kill).

    state = load_train_state(out / STATE_FILE, identity)     # None: start afresh
    batches = ...skipping state["step"] * batch_size examples...  # the data order an unbroken run would have
    train_oft(..., start=state, state_path=out / STATE_FILE, identity=identity)

The state file holds the whole model's weights, the optimizer's state (AdamW's moments), the step reached, the
loss curve so far, the checkpoints written, torch's random state, and the ``identity``: the flags that decide what
training computes (not those of choosing, testing or logging). It is written every :data:`STATE_EVERY` steps, at
every checkpoint and at the end, atomically (a temporary file renamed over the old one), so a kill at any moment
leaves the last complete state. A state of another identity is refused, naming each flag that differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

STATE_FILE = "train_state.pt"  # in the recipe's --output_dir
STATE_EVERY = 200              # steps between states (besides every checkpoint and the last step)
# recipe flags that do not change what training computes (choosing, testing, logging, where things go; "refine":
# the MetaWorld recipe's stage 2, which trains in a directory of its own with its own flags)
NOT_TRAINING = frozenset({"output_dir", "select_episodes", "execute_steps", "eval_episodes", "test_episodes",
                          "eval_batch_size", "eval_workers", "install_dir", "progress", "resume", "refine",
                          "task_floor"})
# training flags added to the recipes after runs were made, each with the value that trains as those runs did: a
# record or a state without one of them was made with this value (flags whose default changed are not here:
# proprio_slots' absence means False, the old behaviour, and a run that lacks it must be continued with it)
ADDED_LATER: dict[str, Any] = {"onpolicy_episodes": 0, "onpolicy_seed": 100000, "onpolicy_teacher": None,
                               "onpolicy_aggregate": [], "lora_rank": 0}


def training_identity(record: Mapping[str, Any], autocast: bool) -> dict[str, Any]:
    """The recipe config's record (``cfg.to_record()``) without :data:`NOT_TRAINING`, with the autocast it resolved
    to (``bf16_autocast`` null resolves per machine)."""
    return {**ADDED_LATER, **{k: v for k, v in record.items() if k not in NOT_TRAINING},
            "autocast_resolved": bool(autocast)}


def save_train_state(path: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     history: list[dict[str, float]], checkpoints: Mapping[int, Path],
                     identity: Mapping[str, Any]) -> None:
    """Write the state after ``step`` optimizer steps to ``path``, atomically."""
    state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "history": list(history), "checkpoints": {int(k): str(v) for k, v in checkpoints.items()},
             "torch_rng": torch.get_rng_state(), "identity": dict(identity)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_train_state(path: Path, identity: Mapping[str, Any]) -> dict[str, Any] | None:
    """The state at ``path`` (None when there is none); ValueError when it is not one or when it was written by a
    run with other training flags (each named, with both values)."""
    if not Path(path).is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        found = {**ADDED_LATER, **state["identity"]}
    except Exception as err:  # a file that is not a state: say so instead of a pickle traceback
        raise ValueError(f"{str(path)!r} is not a training state ({type(err).__name__}: {err}); remove it, or "
                         "start afresh (--resume false)") from None
    identity = {**ADDED_LATER, **identity}
    if found != identity:
        keys = sorted(set(found) | set(identity))
        diffs = [f"{k}: {found.get(k)!r} there, {identity.get(k)!r} here" for k in keys
                 if found.get(k) != identity.get(k)]
        raise ValueError(f"{str(path)!r} is the training state of a run with other flags ({'; '.join(diffs)}): use "
                         "the same flags to continue it, another --output_dir, or --resume false to start afresh")
    return state


def restore_train_state(state: Mapping[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load ``state``'s weights, optimizer state and random state into ``model`` and ``optimizer`` (in place);
    returns the step it reached."""
    model.load_state_dict(state["model"], strict=True)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    return int(state["step"])
