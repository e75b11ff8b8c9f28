"""Importing tensorflow safely: always after torch (and triton, when installed), CPU only, quiet logs.

Importing tensorflow before triton in one process aborts it (``LLVM ERROR: inconsistency in registered
CommandLine options``), so every tensorflow import in this package goes through :func:`import_tf`. tensorflow and
mujoco rendering with OSMesa cannot share a process in either order (a segmentation fault): :func:`import_tf` refuses
after such a mujoco, :func:`prismatic_tr.envs.metaworld.env.import_mujoco` before it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

import torch  # noqa: F401  (torch first, always)


def import_tf() -> tuple[ModuleType, ModuleType]:
    """Return ``(tensorflow, tensorflow_datasets)``, imported after torch/triton, with GPUs hidden from TF."""
    if importlib.util.find_spec("triton") is not None:
        try:
            import triton  # noqa: F401
        except Exception:  # a broken triton must not stop data loading
            pass
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" not in sys.modules and "mujoco" in sys.modules and os.environ.get("MUJOCO_GL") == "osmesa":
        raise RuntimeError("mujoco with OSMesa is loaded in this process, and tensorflow would crash it (both load an "
                           "LLVM; segmentation fault): read or write RLDS data in another process, as "
                           "prismatic_tr.envs.metaworld.demos.expert_stream runs the experts in a child process")
    try:
        import tensorflow as tf
        import tensorflow_datasets as tfds
    except ImportError as exc:
        raise ImportError(
            "reading RLDS data needs tensorflow and tensorflow-datasets: pip install 'prismatic_tr[train]'"
        ) from exc
    try:
        tf.config.set_visible_devices([], "GPU")  # keep TF off the GPUs that torch trains on
    except RuntimeError:  # devices already initialised in this process
        pass
    return tf, tfds
