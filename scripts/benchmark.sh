#!/usr/bin/env bash
# Set up (see setup_env.sh) and run the main job: the policy-step benchmark on the default model.
# Extra arguments go to vla_scripts/benchmark.py (e.g. --preset tiny).
set -euo pipefail
cd "$(dirname "$0")/.."
# Let Python cache compiled modules: without it every process recompiles torch._dynamo (~15 s each).
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup_env.sh
STACK=${STACK:-newest}
VENV=${VENV:-$([[ $STACK == openvla ]] && echo .venv-openvla || echo .venv)}
"$VENV/bin/python" vla_scripts/benchmark.py "$@"
