"""Serve a policy over HTTP with OpenVLA's deploy protocol (``POST /act``, json-numpy), with token reduction,
dynamic micro-batching and checked input; and load-test such a server (:mod:`prismatic_tr.serve.loadtest`).

    python vla_scripts/deploy.py --setting vision:diverse:0.1@0.25        # the bundled policy, reduced

Needs the ``serve`` extra (fastapi, uvicorn, json-numpy, requests): ``pip install 'prismatic_tr[serve]'``.
"""

from prismatic_tr.serve.app import create_app, make_server, run_server
from prismatic_tr.serve.config import ServeLimits
from prismatic_tr.serve.errors import ModelError, RequestError
from prismatic_tr.serve.policy import ServedPolicy, apply_setting, load_served_policy
from prismatic_tr.serve.protocol import ActRequest, ModelSpec, encode_action, parse_request

__all__ = [
    "ActRequest",
    "ModelError",
    "ModelSpec",
    "RequestError",
    "ServeLimits",
    "ServedPolicy",
    "apply_setting",
    "create_app",
    "encode_action",
    "load_served_policy",
    "make_server",
    "parse_request",
    "run_server",
]
