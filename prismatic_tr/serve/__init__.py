"""Serve a policy over HTTP with OpenVLA's deploy protocol (``POST /act``, json-numpy), with token reduction,
dynamic micro-batching and checked input; and load-test such a server (:mod:`prismatic_tr.serve.loadtest`).

    python vla_scripts/deploy.py --setting vision:diverse:0.1@0.25        # the bundled policy, reduced

Needs the ``serve`` extra (fastapi, uvicorn, json-numpy, requests): ``pip install 'prismatic_tr[serve]'``. The names
below load on first use, so the command lines parse their flags (and ``--help``) without it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "create_app": "app", "make_server": "app", "run_server": "app",
    "ServeLimits": "config",
    "ModelError": "errors", "RequestError": "errors",
    "ServedPolicy": "policy", "apply_setting": "policy", "load_served_policy": "policy",
    "ActRequest": "protocol", "ModelSpec": "protocol", "encode_action": "protocol", "parse_request": "protocol",
}
__all__ = sorted(_EXPORTS)
SERVE_EXTRA = "pip install 'prismatic_tr[serve]'"


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'prismatic_tr.serve' has no attribute {name!r}")
    try:
        module = importlib.import_module(f"prismatic_tr.serve.{_EXPORTS[name]}")
    except ImportError as err:
        raise ImportError(f"prismatic_tr.serve.{name} needs the serve extra ({err}); {SERVE_EXTRA}") from err
    return getattr(module, name)
