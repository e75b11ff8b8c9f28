"""OpenVLA-OFT's robot client (``experiments/robot/openvla_utils.py`` of ``../shared/reference/openvla_oft``), imported
unchanged so tests can run its ``get_vla_action`` against this package's models.

The client imports more than ``get_vla_action`` uses. What is missing here is stood in for while the module loads and
taken out of ``sys.modules`` right after (every stand-in is a placeholder that ``get_vla_action`` never touches):

- ``prismatic.vla.datasets.rlds.utils.data_utils`` (not in the reference copy: it pulls in dlimp and the training
  stack), imported for ``NormalizationType`` alone: a module exposing ``prismatic.vla.constants.NormalizationType``,
  as the reference README says;
- diffusers' ``DDIMScheduler`` (OFT's ``action_heads.py``, diffusion head only): :func:`import_action_heads`;
- on transformers 5: OFT's ``processing_prismatic`` (``PaddingStrategy`` is gone) and transformers'
  ``AutoModelForVision2Seq`` (renamed ``AutoModelForImageTextToText``), which only ``get_vla`` / ``get_processor``
  use.

The client's import-time side effects are undone too: ``json_numpy.patch()`` (``json.dump(s)`` / ``json.load(s)``)
and ``np.set_printoptions``. It imports tensorflow at module level, so triton (when installed) is imported first
(a process that imports tensorflow before triton aborts, see ENVIRONMENT.md).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import types
from collections.abc import Iterator

import numpy as np
import pytest
from helpers.oft_checkpoint import import_action_heads
from helpers.reference_clients import import_openvla_oft

CLIENT = "experiments.robot.openvla_utils"
_DATA_UTILS = "prismatic.vla.datasets.rlds.utils.data_utils"
_PROCESSING = "prismatic.extern.hf.processing_prismatic"


def _placeholder(name: str) -> type:
    """A class that refuses to be used: the client imports it, ``get_vla_action`` never calls it."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{name} is a test stand-in: the reference client imports it, this test must not use it")

    return type(name, (), {"__init__": refuse, "from_pretrained": classmethod(refuse)})


def _stand_ins() -> dict[str, types.ModuleType]:
    """The modules to place in ``sys.modules`` while the client loads (see the module docstring)."""
    constants = import_openvla_oft("prismatic.vla.constants")
    parts = _DATA_UTILS.split(".")
    modules = {".".join(parts[:i]): types.ModuleType(".".join(parts[:i])) for i in range(3, len(parts) + 1)}
    modules[_DATA_UTILS].NormalizationType = constants.NormalizationType  # type: ignore[attr-defined]
    try:
        importlib.import_module(_PROCESSING)
    except ImportError:
        processing = types.ModuleType(_PROCESSING)
        for name in ("PrismaticImageProcessor", "PrismaticProcessor"):
            setattr(processing, name, _placeholder(name))
        modules[_PROCESSING] = processing
    return modules


@contextlib.contextmanager
def _import_time_effects_undone() -> Iterator[None]:
    """Restore what the client changes globally when imported (json functions, numpy print options)."""
    saved_json = {name: getattr(json, name) for name in ("dump", "dumps", "load", "loads")}
    saved_print = np.get_printoptions()
    try:
        yield
    finally:
        for name, fn in saved_json.items():
            setattr(json, name, fn)
        np.set_printoptions(**saved_print)


@contextlib.contextmanager
def _transformers_names() -> Iterator[None]:
    """``transformers.AutoModelForVision2Seq`` on transformers 5 (where it is ``AutoModelForImageTextToText``)."""
    import transformers

    if hasattr(transformers, "AutoModelForVision2Seq"):
        yield
        return
    transformers.AutoModelForVision2Seq = _placeholder("AutoModelForVision2Seq")
    try:
        yield
    finally:
        del transformers.AutoModelForVision2Seq


def import_oft_client() -> types.ModuleType:
    """OFT's ``experiments/robot/openvla_utils.py``, unchanged; skips when the reference copy or one of its real
    dependencies (tensorflow, json_numpy, requests, huggingface_hub) is absent."""
    for name in ("tensorflow", "json_numpy", "requests", "huggingface_hub"):
        pytest.importorskip(name, reason=f"OFT's robot client imports {name}")
    if CLIENT in sys.modules:
        return sys.modules[CLIENT]
    with contextlib.suppress(ImportError):
        import triton  # noqa: F401  (before tensorflow)
    import_action_heads()  # leaves prismatic.models.action_heads imported (diffusers stood in if absent)
    stand_ins = {k: v for k, v in _stand_ins().items() if k not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        with _import_time_effects_undone(), _transformers_names():
            return import_openvla_oft(CLIENT)
    finally:
        for name in stand_ins:
            sys.modules.pop(name, None)
