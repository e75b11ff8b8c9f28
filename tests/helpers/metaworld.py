"""Whether the MetaWorld tests can run here: the metaworld extra and OSMesa (offscreen rendering on a CPU)."""

from __future__ import annotations

import ctypes.util
import importlib.util

import pytest

MISSING = ("metaworld is not installed (pip install -e '.[metaworld]' or METAWORLD=1 bash scripts/setup_env.sh)"
           if importlib.util.find_spec("metaworld") is None else
           "OSMesa is not installed (apt-get install libosmesa6), so MetaWorld cannot render offscreen on a CPU"
           if ctypes.util.find_library("OSMesa") is None else None)
needs_metaworld = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
