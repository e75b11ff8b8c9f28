"""Weights of an OpenVLA checkpoint directory: key names, streaming load into a model on meta, save.

Layout (as OpenVLA's ``save_pretrained`` writes it): ``model.safetensors``, or shards listed in
``model.safetensors.index.json`` (``{"weight_map": {key: file}}``). Keys equal the native model's
``state_dict`` keys except LayerScale: OpenVLA renames timm's ``ls1.gamma`` / ``ls2.gamma`` to
``ls1.scale_factor`` / ``ls2.scale_factor`` (transformers rewrites parameter names containing "gamma").

Loading streams one tensor at a time from the memory-mapped files into the model's meta parameters, cast to
the target dtype and device, so a 7B checkpoint never needs a second copy of the model in memory.

Remote code: a checkpoint like ``openvla/openvla-7b`` also holds OpenVLA's ``*.py`` files, named by the ``auto_map`` of
``config.json``, ``preprocessor_config.json`` and ``tokenizer_config.json``; :func:`carry_remote_code` is the one place
that carries them from a base checkpoint into one written from it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 5 * 2**30
_LAYERSCALE = re.compile(r"^(vision_backbone\.(?:featurizer|fused_featurizer)\..*\.ls[12])\.(gamma|scale_factor)$")
# Buffers some transformers versions saved although the model rebuilds them (rotary frequencies).
_IGNORED = re.compile(r"\.rotary_emb\.inv_freq$")


# follows OpenVLA c8f03f48 prismatic/extern/hf/modeling_prismatic.py (MIT, see NOTICE): LayerScale's gamma is stored as
# scale_factor there, so checkpoints load in both directions.
def to_checkpoint_key(name: str) -> str:
    """Native ``state_dict`` key -> OpenVLA checkpoint key (LayerScale ``gamma`` -> ``scale_factor``)."""
    m = _LAYERSCALE.match(name)
    return f"{m.group(1)}.scale_factor" if m else name


def from_checkpoint_key(key: str) -> str:
    """OpenVLA checkpoint key -> native ``state_dict`` key (``scale_factor`` -> timm's ``gamma``)."""
    m = _LAYERSCALE.match(key)
    return f"{m.group(1)}.gamma" if m else key


def weight_files(directory: str | os.PathLike) -> list[Path]:
    """The safetensors files of a checkpoint directory; ValueError naming what is there otherwise."""
    d = Path(directory)
    if (d / INDEX_NAME).is_file():
        with open(d / INDEX_NAME) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        missing = [name for name in files if not (d / name).is_file()]
        if missing:
            raise ValueError(f"{d / INDEX_NAME} lists shards that are missing: {missing}")
        return [d / name for name in files]
    if (d / WEIGHTS_NAME).is_file():
        return [d / WEIGHTS_NAME]
    found = sorted(p.name for p in d.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".json"))
    raise ValueError(f"{str(d)!r} has no {WEIGHTS_NAME} or {INDEX_NAME} (found {found}); "
                     "only safetensors checkpoints are loaded natively")


def _iter_checkpoint(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    for path in files:
        try:
            handle = safe_open(str(path), framework="pt", device="cpu")
        except Exception as err:  # noqa: BLE001 (safetensors raises its own error type)
            raise ValueError(f"cannot read {str(path)!r} as safetensors: {err}") from err
        with handle as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                yield key, f.get_tensor(key)


def _assign(model: nn.Module, name: str, value: torch.Tensor) -> None:
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name)
    if leaf in module._parameters:
        old = module._parameters[leaf]
        module._parameters[leaf] = nn.Parameter(value, requires_grad=old.requires_grad if old is not None else True)
    else:
        module._buffers[leaf] = value


def _listing(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return f"{shown}, ... ({len(keys)} in all)" if len(keys) > limit else shown


def load_weights_(model: nn.Module, directory: str | os.PathLike, dtype: torch.dtype, device: torch.device | str) -> None:
    """Fill ``model`` (parameters on meta or real) from the checkpoint in ``directory``, in place.

    Floating tensors are cast to ``dtype``; every tensor goes to ``device``. Raises ValueError listing the
    missing keys (in the model, not in the checkpoint) or unexpected keys (in the checkpoint only), or a shape
    that does not match, before returning; the model is then partly filled and should be discarded.
    """
    expected = {name: t.shape for name, t in model.state_dict().items()}
    seen: set[str] = set()
    unexpected: list[str] = []
    for key, tensor in _iter_checkpoint(weight_files(directory)):
        name = from_checkpoint_key(key)
        if name not in expected:
            if not _IGNORED.search(key):
                unexpected.append(key)
            continue
        if tuple(tensor.shape) != tuple(expected[name]):
            raise ValueError(f"checkpoint tensor {key!r} has shape {tuple(tensor.shape)}; the model built from "
                             f"config.json expects {tuple(expected[name])}")
        value = tensor.to(dtype) if tensor.is_floating_point() else tensor
        _assign(model, name, value.to(device))
        seen.add(name)
    missing = sorted(set(expected) - seen)
    if missing or unexpected:
        parts = ([f"missing keys (the model has them, the checkpoint does not): {_listing(missing)}"] if missing else []) + (
            [f"unexpected keys (in the checkpoint only): {_listing(sorted(unexpected))}"] if unexpected else [])
        raise ValueError(f"checkpoint {str(directory)!r} does not match its config: " + "; ".join(parts))


def save_weights(model: nn.Module, directory: str | os.PathLike, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> list[Path]:
    """Write ``model``'s weights with OpenVLA's key names: one file, or shards plus an index when larger."""
    if max_shard_bytes < 1:
        raise ValueError(f"max_shard_bytes={max_shard_bytes}; must be >= 1")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in model.state_dict().items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][to_checkpoint_key(name)] = tensor.detach().contiguous().cpu()
        size += nbytes
    for stale in [*d.glob("model-*-of-*.safetensors"), d / WEIGHTS_NAME, d / INDEX_NAME]:
        stale.unlink(missing_ok=True)
    if len(shards) == 1:
        save_file(shards[0], str(d / WEIGHTS_NAME), metadata={"format": "pt"})
        return [d / WEIGHTS_NAME]
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map: dict[str, str] = {}
    for name, shard in zip(names, shards, strict=True):
        save_file(shard, str(d / name), metadata={"format": "pt"})
        weight_map.update({key: name for key in shard})
    total = sum(t.numel() * t.element_size() for shard in shards for t in shard.values())
    with open(d / INDEX_NAME, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    return [d / name for name in names]


# --- remote code (OpenVLA's ``*.py`` files and the ``auto_map`` entries that name them) ---

# The files of a checkpoint directory whose ``auto_map`` names remote code: model config, image processor, tokenizer,
# processor (openvla/openvla-7b has the first three).
AUTO_MAP_FILES = ("config.json", "preprocessor_config.json", "tokenizer_config.json", "processor_config.json")
LOADING_NOTE = "README.md"
_NOTE_MARK = "<!-- written by prismatic_tr: what loads this checkpoint -->"
_NOTE = f"""{_NOTE_MARK}
# An OpenVLA-layout checkpoint without remote code

Written by prismatic_tr from a base that carried no remote code (no `auto_map`), so transformers' auto classes
(`AutoModelForVision2Seq` / `AutoProcessor` with `trust_remote_code=True`) cannot load it. Load it with this package,
on OpenVLA's pinned stack or the newest one:

```python
from prismatic_tr.models import load_vla
from prismatic_tr.vla import apply_token_reduction_from_config

vla, processor = load_vla("<this directory>")
apply_token_reduction_from_config(vla)  # the token reduction it was trained with, if config.json holds one
```
"""
_RELATIVE_IMPORT = re.compile(r"^\s*(?:from\s+\.(\w+)\s+import|import\s+\.(\w+))", re.MULTILINE)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read {str(path)!r} as JSON: {err}") from err


def auto_maps(directory: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``{file name: its auto_map}`` for each of :data:`AUTO_MAP_FILES` in ``directory`` that has a non-empty one."""
    d = Path(directory)
    maps = {name: _read_json(d / name).get("auto_map") for name in AUTO_MAP_FILES if (d / name).is_file()}
    return {name: m for name, m in maps.items() if m}


def _module_files(directory: Path, maps: dict[str, dict[str, Any]]) -> list[str]:
    """The ``*.py`` files the auto_maps name ("module.Class", or [slow, fast] lists for tokenizers, also as a whole
    legacy tokenizer auto_map), plus the modules they import relatively, transitively; "repo--module.Class" references
    live in another repository and are skipped."""
    values = [v for m in maps.values() for v in (m.values() if isinstance(m, dict) else [m])]
    refs = [r for v in values for r in (v if isinstance(v, (list, tuple)) else [v])]
    todo = sorted({f"{r.rsplit('.', 1)[0]}.py" for r in refs if isinstance(r, str) and "--" not in r and "." in r})
    found: list[str] = []
    while todo:
        name = todo.pop()
        if name in found:
            continue
        if not (directory / name).is_file():
            raise ValueError(f"{str(directory)!r} names remote code {name!r} in its auto_map, but has no such file")
        found.append(name)
        text = (directory / name).read_text()
        todo += [f"{a or b}.py" for a, b in _RELATIVE_IMPORT.findall(text)]
    return sorted(found)


def carry_remote_code(base: str | os.PathLike | None, out: str | os.PathLike) -> list[Path]:
    """Make the checkpoint in ``out``, written from ``base``, load the ways ``base`` loads; returns the files written.

    ``base`` with remote code (an ``auto_map`` in any of :data:`AUTO_MAP_FILES`, as ``openvla/openvla-7b``): the ``*.py``
    files its auto_maps name (and the modules those import relatively) are copied into ``out``, and each of ``out``'s
    :data:`AUTO_MAP_FILES` that ``base`` has an auto_map for gets that ``auto_map`` unchanged, so OpenVLA's own loading
    path (``AutoProcessor`` / ``AutoModelForVision2Seq.from_pretrained(out, trust_remote_code=True)`` on its pins)
    works on ``out``. Call it after the model and processor files are in ``out``; running it again changes nothing.

    ``base`` None or without remote code: ``out`` gets a ``README.md`` saying that this package's ``load_vla`` loads it
    (a README.md of another origin is kept).

    Raises ValueError when ``base`` is not a directory, a JSON file cannot be read, or an auto_map names a module
    file ``base`` lacks.
    """
    dest = Path(out)
    if not dest.is_dir():
        raise ValueError(f"out={str(out)!r} is not a directory; write the checkpoint there first")
    src = None if base is None else Path(base)
    if src is not None and not src.is_dir():
        raise ValueError(f"base={str(base)!r} is not a checkpoint directory")
    maps = auto_maps(src) if src is not None else {}
    note = dest / LOADING_NOTE
    ours = note.is_file() and note.read_text().startswith(_NOTE_MARK)
    if src is None or not maps:
        if note.exists() and not ours:
            return []
        note.write_text(_NOTE)
        return [note]
    if ours:
        note.unlink()
    return _copy_remote_code(src, dest, maps)


def _copy_remote_code(src: Path, dest: Path, maps: dict[str, dict[str, Any]]) -> list[Path]:
    written = []
    for name in _module_files(src, maps):
        if (src / name).resolve() != (dest / name).resolve():
            shutil.copyfile(src / name, dest / name)
        written.append(dest / name)
    for name, auto_map in maps.items():
        if (dest / name).is_file():
            data = _read_json(dest / name)
            data["auto_map"] = auto_map
            (dest / name).write_text(json.dumps(data, indent=2) + "\n")
            written.append(dest / name)
    return written
