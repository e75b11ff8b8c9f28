"""The trained tabletop policy that ships with the package (``prismatic_tr/assets/tabletop_policy``).

It is an OpenVLA checkpoint directory (config.json, model.safetensors, tokenizer and preprocessor files,
dataset_statistics.json) plus the records of how it was made: ``training_curve.csv``, ``evaluation.json``
(command settings, closed-loop success on unseen episodes) and ``demos.json`` (the demonstrations).
``vla_scripts/train_policy.py --install_dir prismatic_tr/assets/tabletop_policy`` remakes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

BUNDLED_POLICY_DIR = Path(__file__).resolve().parents[1] / "assets" / "tabletop_policy"
UNNORM_KEY = "tabletop_pick"  # the dataset key of its action statistics


def bundled_policy_dir() -> Path:
    """The bundled policy's directory; ValueError saying how to make it when it is missing."""
    if not (BUNDLED_POLICY_DIR / "config.json").is_file():
        raise ValueError(f"the bundled policy is missing from {BUNDLED_POLICY_DIR}; train it with "
                         f"`python vla_scripts/train_policy.py --install_dir {BUNDLED_POLICY_DIR}`")
    return BUNDLED_POLICY_DIR


def load_bundled_policy(dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """(vla, processor) of the bundled policy, loaded natively."""
    from prismatic_tr.models import load_vla

    return load_vla(bundled_policy_dir(), dtype=dtype, device=device)
