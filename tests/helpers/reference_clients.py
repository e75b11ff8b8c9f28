"""Access to the reference clients (OpenVLA's and OpenVLA-OFT's own code) for parity and integration tests.

The clients live outside this repository (``../shared/reference`` beside the checkout, or the folder named by
``PRISMATIC_TR_REFERENCE_DIR``); they are imported from there, never copied. Every accessor skips the calling
test with a reason when the folder is absent or the code cannot run on the installed stack.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REFERENCE_ENV = "PRISMATIC_TR_REFERENCE_DIR"
_REPO_ROOT = Path(__file__).resolve().parents[2]
_HF_PACKAGE = "openvla_hf_reference"


def reference_dir() -> Path | None:
    """``$PRISMATIC_TR_REFERENCE_DIR`` if set, else ``<repo>/../shared/reference`` if it exists, else None."""
    env = os.environ.get(REFERENCE_ENV)
    if env:
        return Path(env)
    default = _REPO_ROOT.parent / "shared" / "reference"
    return default if default.is_dir() else None


def require_reference(name: str) -> Path:
    """The reference client folder ``name`` (e.g. "openvla_hf"); skips the test when it is absent."""
    root = reference_dir()
    if root is None or not (root / name).is_dir():
        pytest.skip(f"reference client {name!r} not found: set {REFERENCE_ENV} or place it in ../shared/reference")
    return root / name


def import_openvla_hf(module: str) -> types.ModuleType:
    """``configuration_prismatic``, ``modeling_prismatic`` or ``processing_prismatic`` of OpenVLA's remote code.

    The files use relative imports, so they are loaded as submodules of a package made on the fly. Skips the
    test when the module does not import on this stack (e.g. processing on transformers 5: ``PaddingStrategy``).
    """
    root = require_reference("openvla_hf")
    if _HF_PACKAGE not in sys.modules:
        package = types.ModuleType(_HF_PACKAGE)
        package.__path__ = [str(root)]  # type: ignore[attr-defined]
        sys.modules[_HF_PACKAGE] = package
    try:
        return importlib.import_module(f"{_HF_PACKAGE}.{module}")
    except ImportError as err:
        pytest.skip(f"OpenVLA's {module}.py does not import on this stack: {err}")


def import_openvla_oft(module: str = "prismatic.extern.hf.modeling_prismatic") -> types.ModuleType:
    """A module of OpenVLA-OFT's code (``openvla_oft/`` on ``sys.path``, ``prismatic`` as a namespace package)."""
    root = str(require_reference("openvla_oft"))
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        return importlib.import_module(module)
    except ImportError as err:
        pytest.skip(f"OpenVLA-OFT's {module} does not import on this stack: {err}")


@contextmanager
def tiny_timm_towers() -> Iterator[None]:
    """Inside the block, ``timm.create_model`` builds OpenVLA's towers at the package's tiny sizes.

    Reference code calls ``timm.create_model(id, ...)`` for the real DINOv2-L / SigLIP-so400m towers; this
    adds the overrides of :data:`prismatic_tr.models.config.TINY_TIMM_KWARGS` (same classes and token geometry,
    smaller width and depth) so a checkpoint built by the reference code is small.
    """
    import timm

    from prismatic_tr.models.config import tiny_timm_kwargs

    original = timm.create_model

    def create_model(model_name: str, *args: object, **kwargs: object) -> object:
        return original(model_name, *args, **{**kwargs, **(tiny_timm_kwargs(model_name) or {})})

    timm.create_model = create_model
    try:
        yield
    finally:
        timm.create_model = original
