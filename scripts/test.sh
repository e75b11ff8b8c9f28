#!/usr/bin/env bash
# Set up (see setup_env.sh) and run the whole test suite on the CPU. Extra arguments go to pytest.
exec bash "$(dirname "$0")/setup_env.sh" -m pytest -q "$@"
