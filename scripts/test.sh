#!/usr/bin/env bash
# Set up (see setup_env.sh) and run the whole test suite on the CPU. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
STACK=${STACK:-newest}
VENV=${VENV:-$([[ $STACK == openvla ]] && echo .venv-openvla || echo .venv)}
"$VENV/bin/python" -m pytest -q "$@"
