"""Shared test data for the data / fine-tuning tests: a tiny RLDS dataset and a tiny saved reference VLA.

Both writers are idempotent per directory, so several test modules can call them with the session's base
temp dir and the files are written once per session.
"""

from __future__ import annotations

from pathlib import Path

import torch  # noqa: F401  (torch before tensorflow)

from prismatic_tr.data import SyntheticRLDSSpec, write_synthetic_rlds

DATASET = "tiny_rlds"
# 6 episodes x 8 steps = 48 transitions in "train", same in "val".
SPEC = SyntheticRLDSSpec(dataset_name=DATASET, num_episodes=6, steps_per_episode=8, image_size=32, splits=("train", "val"))
# Open-X layout: image_primary + observation/natural_language_instruction.
OXE_SPEC = SyntheticRLDSSpec(
    dataset_name="tiny_oxe", num_episodes=2, steps_per_episode=4, image_size=32,
    image_key="image_primary", instruction_key="observation/natural_language_instruction",
)
NO_ACTION_SPEC = SyntheticRLDSSpec(dataset_name="tiny_no_action", num_episodes=1, steps_per_episode=2, image_size=16,
                                   action_key=None)


def rlds_root(base: Path) -> Path:
    """``base/rlds`` holding the three tiny datasets above."""
    root = Path(base) / "rlds"
    for spec in (SPEC, OXE_SPEC, NO_ACTION_SPEC):
        write_synthetic_rlds(root, spec)
    return root


def tiny_vla_dir(base: Path) -> Path:
    """``base/tiny_vla``: the tiny reference model (seed 0) saved with its processor."""
    out = Path(base) / "tiny_vla"
    if not (out / "model.safetensors").is_file():
        from prismatic_tr.models import build_vla
        from prismatic_tr.models.processor import build_processor

        vla = build_vla("tiny", seed=0)
        vla.save_pretrained(out)
        build_processor(vla.config).save_pretrained(out)
    return out
