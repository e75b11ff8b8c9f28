"""Model families: which kind of OpenVLA a model, a checkpoint directory or a benchmark run is, asked in one place.

The rest of the package asks :func:`family_of` and looks the answer's ``name`` up in one table per question, kept
in the layer that owns the question:

- how its observation is built: :data:`prismatic_tr.policy.closed_loop.OBSERVATIONS`;
- how a control step is timed: :data:`prismatic_tr.bench.vla.benchmark.STEPS`;
- how it fine-tunes: :data:`prismatic_tr.training.loop.TASKS`;
- how it is served: :data:`prismatic_tr.serve.policy.SERVED` (what a request holds, what the answer is).

The families (:data:`FAMILIES`):

- ``openvla``: the native OpenVLA model (:class:`~prismatic_tr.models.NativeOpenVLA`);
- ``openvla-remote``: OpenVLA's own remote code (``trust_remote_code``), or anything else with OpenVLA's
  ``predict_action``;
- ``openvla-oft``: the native OpenVLA-OFT model (:class:`~prismatic_tr.models.NativeOpenVLAOFT`);
- ``openvla-oft-remote``: OpenVLA-OFT's own code (its ``predict_action`` takes an ``action_head``).

A checkpoint directory is ``openvla-oft`` when it has OFT's layout (its component files, or an ``oft`` entry in its
``config.json``), else ``openvla``; a benchmark run's records say which step they timed (``model_kind``). Adding a
family: a :class:`Family` in :data:`FAMILIES` and its test in :func:`_model_family`, then a row in each table
above that it needs (a table without one fails with ``KeyError`` naming the family).
"""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .modeling import NativeOpenVLA
from .oft import NativeOpenVLAOFT
from .oft_checkpoint import BUILT, REFUSED
from .wrappers import unwrap_vla


@dataclass(frozen=True)
class Family:
    """One model family: ``name`` (the key of every per-family table and of a run record's ``model_kind``);
    ``native``: this package's implementation, not a checkpoint's remote code; ``chunked``: OFT's kind, which reads
    a chunk of continuous actions from every action position's hidden state in one parallel pass, instead of
    decoding one action's tokens."""

    name: str
    native: bool
    chunked: bool


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("openvla", native=True, chunked=False),
    Family("openvla-remote", native=False, chunked=False),
    Family("openvla-oft", native=True, chunked=True),
    Family("openvla-oft-remote", native=False, chunked=True),
)}


def family_of(obj: Any, config: dict[str, Any] | None = None) -> Family:
    """The family of ``obj``: a model (through PEFT, DDP and ``torch.compile`` wrappers), a checkpoint directory or
    hub id (``str`` / path; ``config``: its ``config.json`` when already read) or a benchmark run's records (a list
    of record dicts, or one record)."""
    if isinstance(obj, (str, os.PathLike)):
        return FAMILIES[_checkpoint_family(Path(obj), config)]
    if isinstance(obj, list):
        return family_of(obj[0]) if obj else FAMILIES["openvla"]
    if isinstance(obj, dict):
        return FAMILIES[obj.get("model_kind", "openvla")]  # records written before OFT are OpenVLA's
    return FAMILIES[_model_family(obj)]


def _model_family(model: Any) -> str:
    try:
        model = unwrap_vla(model)
    except ValueError:
        pass  # not a VLA we can see into (a stand-in in a test): its own class decides
    if isinstance(model, NativeOpenVLAOFT):
        return "openvla-oft"
    if isinstance(model, NativeOpenVLA):
        return "openvla"
    return "openvla-oft-remote" if _takes_action_head(model) else "openvla-remote"


# follows OpenVLA-OFT 213c5ff8 prismatic/extern/hf/modeling_prismatic.py predict_action (MIT, see NOTICE): its
# signature takes the action head and proprio projector, which OpenVLA's does not.
def _takes_action_head(model: Any) -> bool:
    fn = getattr(type(model), "predict_action", None)
    if not callable(fn):
        return False
    try:
        return "action_head" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _checkpoint_family(directory: Path, config: dict[str, Any] | None) -> str:
    """``openvla-oft`` for OFT's layout: OFT component files beside the model, or an ``oft`` entry in its
    ``config.json`` (read here when ``config`` is None; a directory without one, or a hub id, is ``openvla``)."""
    if config is None:
        if not (directory / "config.json").is_file():
            return "openvla"
        config = json.loads((directory / "config.json").read_text())
    if "oft" in config:
        return "openvla-oft"
    names = [p.name.partition("--") for p in directory.iterdir()] if directory.is_dir() else []
    oft = any(sep and name in (*BUILT, *REFUSED) and rest.endswith(".pt") for name, sep, rest in names)
    return "openvla-oft" if oft else "openvla"
