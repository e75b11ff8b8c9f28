"""Serve a policy with OpenVLA's deploy protocol, token reduction and dynamic micro-batching.

``POST /act`` takes exactly what OpenVLA's ``vla-scripts/deploy.py`` takes (``{"image": ndarray, "instruction":
str, "unnorm_key": optional}`` with json-numpy, or ``{"encoded": ...}``) and answers the action the same way, so
OpenVLA clients work unchanged. An OpenVLA-OFT checkpoint (``--vla_path``, OFT's layout) takes OFT's fields
(``full_image``, ``wrist_image`` ..., the raw ``state``) and answers the action chunk as a list of per-step
arrays, as OFT's deploy.py does. Concurrent requests run as one batched ``predict_action``. Bad input gets a 4xx
naming the field (never 200); a model error a 500 with an id in the log. ``GET /health``, ``GET /info`` (model,
setting, dtype, batch limits and counters, memory). SIGTERM / Ctrl-C answer the requests in flight, then exit.

    python vla_scripts/deploy.py                                          # the bundled policy, unreduced
    python vla_scripts/deploy.py --setting vision:diverse:0.1@0.25        # ... reduced inside the towers
    python vla_scripts/deploy.py --adapter vision-diverse-0.1-0.25        # a shipped adapter, its own setting
    python vla_scripts/deploy.py --vla_path /path/to/openvla-7b --host 0.0.0.0 --setting diverse:0.25
    python vla_scripts/deploy.py --preset cpu-bench                       # random weights, for load tests
    python vla_scripts/deploy.py --vla_path /path/to/oft-checkpoint --setting vision:diverse:0.1@0.25   # OFT

Bad flags exit with status 2 before any model is loaded. Needs the ``serve`` extra: pip install 'prismatic_tr[serve]'.
"""

from __future__ import annotations

from collections.abc import Sequence

from prismatic_tr.cli import parse_config_or_exit, run_command
from prismatic_tr.serve.commands import DeployConfig, deploy

PROG = "deploy.py"


def parse_config(args: Sequence[str] | None = None) -> DeployConfig:
    """Parse flags; on a bad value print ``deploy.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(DeployConfig, args, PROG, description=__doc__)


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-deploy``): parse ``argv``, serve until SIGTERM / SIGINT."""
    return run_command(parse_config, deploy, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
