"""The trained policies that ship with the package: the tabletop ones (``prismatic_tr/assets/tabletop_policy``, and
the OpenVLA-OFT-style ``prismatic_tr/assets/tabletop_oft_policy``) and the OpenVLA-OFT-style MetaWorld MT10 policy
(``prismatic_tr/assets/metaworld_policy``, made by ``vla_scripts/train_metaworld_policy.py``).

It is an OpenVLA checkpoint directory (config.json, model.safetensors, tokenizer and preprocessor files,
dataset_statistics.json) plus the records of how it was made: the training curves, ``evaluation.json`` (settings,
stages, closed-loop success on the validation and the test seed split) and ``demos.json`` (the demonstrations).
One command remakes it from nothing with its defaults (:mod:`prismatic_tr.policy.train`; the shipped weights'
own runs are in ``benchmarks/results/policy_training/README.md``)::

    python vla_scripts/train_policy.py --output_dir outputs/bundled_policy --install_dir prismatic_tr/assets/tabletop_policy
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

BUNDLED_POLICY_DIR = Path(__file__).resolve().parents[1] / "assets" / "tabletop_policy"
UNNORM_KEY = "tabletop_pick"  # the dataset key of its action statistics
# The OFT-style policy (2 cameras, proprio, chunk of 8, L1 head) made from the one above by
# ``vla_scripts/train_oft_policy.py`` (prismatic_tr.policy.oft_recipe); its demonstrations' dataset key:
BUNDLED_OFT_POLICY_DIR = BUNDLED_POLICY_DIR.parent / "tabletop_oft_policy"
OFT_UNNORM_KEY = "tabletop_pick_oft"
# The MetaWorld MT10 policy (2 cameras, the 7-D state as every action slot's input, chunk of 8, L1 head) made by
# ``vla_scripts/train_metaworld_policy.py`` (prismatic_tr.policy.metaworld_recipe; its dataset key is that recipe's
# DATASET, "metaworld_mt10")
BUNDLED_METAWORLD_POLICY_DIR = BUNDLED_POLICY_DIR.parent / "metaworld_policy"


def unnorm_key_for(vla: Any, key: str | None = None) -> str:
    """The action statistics key to un-normalise ``vla``'s actions with: ``key`` when given, else the bundled
    policy's (:data:`UNNORM_KEY`) when the model has it, else the model's only key; ValueError naming the keys
    otherwise (what ``eval_policy.py`` and ``make_onpolicy_data.py`` use)."""
    stats = sorted(getattr(vla, "norm_stats", None) or {})
    chosen = key or (UNNORM_KEY if UNNORM_KEY in stats else (stats[0] if len(stats) == 1 else None))
    if chosen not in stats:
        raise ValueError(f"--unnorm_key {chosen!r} is not among the model's action statistics {stats}")
    return chosen


def _shipped(directory: Path, what: str, remake: str) -> Path:
    """``directory`` when it holds a checkpoint; ValueError naming ``what`` is missing and the ``remake`` command."""
    if not (directory / "config.json").is_file():
        raise ValueError(f"the bundled {what} is missing from {directory}; remake it with `{remake} --install_dir "
                         f"{directory}`")
    return directory


def bundled_policy_dir() -> Path:
    """The bundled policy's directory; ValueError saying how to make it when it is missing (the whole recipe: 73
    minutes alone on 2 CPU cores with AMX-BF16, benchmarks/results/policy_training/README.md)."""
    return _shipped(BUNDLED_POLICY_DIR, "policy",
                    "python vla_scripts/train_policy.py --output_dir outputs/bundled_policy")


def bundled_oft_policy_dir() -> Path:
    """The bundled OFT-style policy's directory; ValueError saying how to make it when it is missing."""
    return _shipped(BUNDLED_OFT_POLICY_DIR, "OFT policy",
                    "python vla_scripts/train_oft_policy.py --output_dir outputs/oft_policy")


def bundled_metaworld_policy_dir() -> Path:
    """The bundled MetaWorld policy's directory; ValueError saying how to make it when it is missing (the whole
    pipeline: ~3.5 h on 2 CPU cores, docs/guides/metaworld.md)."""
    return _shipped(BUNDLED_METAWORLD_POLICY_DIR, "MetaWorld policy",
                    "python vla_scripts/train_metaworld_policy.py --output_dir outputs/metaworld_policy")


def load_bundled_policy(dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """(vla, processor) of the bundled policy, loaded natively."""
    from prismatic_tr.models import load_vla

    return load_vla(bundled_policy_dir(), dtype=dtype, device=device)


def load_bundled_oft_policy(dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """(vla, processor) of the bundled OFT-style policy (a ``NativeOpenVLAOFT``); ValueError saying how to make it
    when it is missing."""
    from prismatic_tr.models import load_vla

    return load_vla(bundled_oft_policy_dir(), dtype=dtype, device=device)
