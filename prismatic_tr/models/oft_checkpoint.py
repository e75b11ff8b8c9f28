"""OpenVLA-OFT's checkpoint layout: the parts beside OpenVLA's ``config.json`` + safetensors.

OFT's fine-tuning writes, into one directory, the (LoRA-merged) VLA as OpenVLA's Hugging Face files, each extra
module's ``state_dict`` as ``<name>--<step or latest>_checkpoint.pt`` (keys prefixed ``module.`` when saved from
DDP) and the action / proprio statistics as ``dataset_statistics.json``, which replace the config's
``norm_stats`` when OFT loads the directory. Built natively: ``action_head`` (L1 regression) and
``proprio_projector``; refused with a ValueError: ``noisy_action_projector`` (diffusion head) and
``vision_backbone`` (FiLM).

The chunk length and normalisation are not in the files (OFT takes them from its platform constants): they come
from the ``oft`` entry this package writes into ``config.json``, else from the caller (``platform``, any
:class:`~.oft_config.OFTSettings` field), else from the heads' shapes (14-D actions: ALOHA, 7-D proprio: BRIDGE,
else OFT's default LIBERO).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoint import _listing
from .oft_config import DEFAULT_PLATFORM, OFTSettings, platform_settings

BUILT = ("action_head", "proprio_projector")
REFUSED = {"noisy_action_projector": "the diffusion action head", "vision_backbone": "FiLM"}
STATISTICS = "dataset_statistics.json"
LATEST = "latest_checkpoint.pt"


# follows OpenVLA-OFT 213c5ff8 experiments/robot/openvla_utils.py find_checkpoint_file / load_component_state_dict
# (MIT, see NOTICE): "<name>--<suffix>" files with "checkpoint" in the name, exactly one per component, DDP's prefix
# dropped, as its finetune.py writes them.
def component_files(directory: str | os.PathLike) -> dict[str, Path]:
    """``{component: its file}`` for the OFT components in ``directory``; ValueError for two files of one component
    or a component the native model does not build."""
    d = Path(directory)
    found: dict[str, list[Path]] = {}
    for path in sorted(d.iterdir()) if d.is_dir() else []:
        name, sep, rest = path.name.partition("--")
        if sep and "checkpoint" in rest and path.suffix == ".pt" and path.is_file():
            found.setdefault(name, []).append(path)
    for name, paths in found.items():
        if len(paths) > 1:
            raise ValueError(f"{str(d)!r} has {len(paths)} {name} checkpoints ({[p.name for p in paths]}); keep one")
        if name in REFUSED:
            raise ValueError(f"{paths[0].name}: {REFUSED[name]} is not built by the native OFT model "
                             f"(it builds {list(BUILT)})")
    return {name: paths[0] for name, paths in found.items() if name in BUILT}


def read_component(path: Path) -> dict[str, torch.Tensor]:
    """A component's state dict on the CPU, DDP's ``module.`` prefix removed."""
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 (pickle / zip errors have many types)
        raise ValueError(f"cannot read {str(path)!r} as a PyTorch state dict: {err}") from err
    if not isinstance(state, dict):
        raise ValueError(f"{str(path)!r} holds a {type(state).__name__}, not a state dict")
    return {k.removeprefix("module."): v for k, v in state.items()}


def infer_settings(directory: str | os.PathLike, config: dict[str, Any], overrides: dict[str, Any] | None,
                   llm_dim: int) -> OFTSettings:
    """The :class:`OFTSettings` of a checkpoint (see the module docstring for the order of sources)."""
    overrides = dict(overrides or {})
    if "oft" in config:
        return OFTSettings.from_dict({**config["oft"], **overrides})
    files = component_files(directory)
    head = read_component(files["action_head"]) if "action_head" in files else None
    proprio = read_component(files["proprio_projector"]) if "proprio_projector" in files else None
    found: dict[str, Any] = {"action_head": "l1_regression" if head is not None else "discrete",
                             "proprio_dim": int(proprio["fc1.weight"].shape[1]) if proprio is not None else None}
    if head is not None:
        found["action_dim"] = int(head["model.fc2.weight"].shape[0])
        hidden = int(head["model.fc1.weight"].shape[0])
        found["head_hidden_dim"] = None if hidden == llm_dim else hidden
    platform = overrides.pop("platform", None)
    if platform is None:
        platform = ("aloha" if found.get("action_dim") == 14 else
                    "bridge" if found["proprio_dim"] == 7 else DEFAULT_PLATFORM)
    return OFTSettings.from_dict({**asdict(platform_settings(platform)), **found, **overrides})


def load_components_(model: nn.Module, directory: str | os.PathLike, dtype: torch.dtype,
                     device: torch.device | str) -> None:
    """Fill ``model.action_head`` / ``model.proprio_projector`` (those it has) from their files, in place.

    ValueError when a file the model needs is absent, a file is there for a component the model lacks, or keys
    are missing / unexpected (listed) or a shape differs."""
    files = component_files(directory)
    for name in BUILT:
        module = getattr(model, name, None)
        if module is None:
            if name in files:
                raise ValueError(f"{files[name].name} is in {str(directory)!r} but the model's OFT settings have "
                                 f"no {name}; set them to match (e.g. proprio_dim, action_head)")
            continue
        if name not in files:
            raise ValueError(f"{str(directory)!r} has no {name}--*_checkpoint.pt, which the model's OFT settings need")
        _assign_state_(module, read_component(files[name]), files[name], dtype, device)


def _assign_state_(module: nn.Module, state: dict[str, torch.Tensor], path: Path, dtype: torch.dtype,
                   device: torch.device | str) -> None:
    expected = module.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        parts = ([f"missing keys: {_listing(missing)}"] if missing else []) + (
            [f"unexpected keys: {_listing(unexpected)}"] if unexpected else [])
        raise ValueError(f"{str(path)!r} does not match the model: " + "; ".join(parts))
    for key, value in state.items():
        if tuple(value.shape) != tuple(expected[key].shape):
            raise ValueError(f"{path.name}: tensor {key!r} has shape {tuple(value.shape)}; the model expects "
                             f"{tuple(expected[key].shape)}")
    cast = {k: (v.to(dtype) if v.is_floating_point() else v).to(device) for k, v in state.items()}
    module.load_state_dict(cast, strict=True, assign=True)


def save_components(model: nn.Module, directory: str | os.PathLike, suffix: str = LATEST) -> list[Path]:
    """Write the model's action head / proprio projector as OFT does (``<name>--<suffix>``) and its statistics as
    ``dataset_statistics.json``; returns the files written."""
    d = Path(directory)
    written = []
    for name in BUILT:
        module = getattr(model, name, None)
        if module is not None:
            path = d / f"{name}--{suffix}"
            torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()}, str(path))
            written.append(path)
    (d / STATISTICS).write_text(json.dumps(model.norm_stats, indent=2))
    return [*written, d / STATISTICS]


def read_statistics(directory: str | os.PathLike) -> dict[str, Any] | None:
    """``dataset_statistics.json`` of a checkpoint ({dataset: {"action": {...}, ...}}), or None when absent."""
    path = Path(directory) / STATISTICS
    if not path.is_file():
        return None
    try:
        stats = json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"cannot read {str(path)!r} as JSON: {err}") from err
    bad = [k for k, v in stats.items() if not isinstance(v, dict) or "action" not in v] if isinstance(stats, dict) else [stats]
    if bad:
        raise ValueError(f"{str(path)!r}: every entry must be a dataset with 'action' statistics; not {bad}")
    return stats
