#!/usr/bin/env bash
# Set up (see setup_env.sh) and run the test suite on the CPU. By default the fast tier (`-m "not slow"`, within
# 10 minutes on 2 cores); `bash scripts/test.sh -m slow` runs the slow tier (real-size backbones, multi-process runs,
# servers, closed loops; pytest's last -m wins) and `bash scripts/test.sh -m ""` everything. CI runs both tiers.
# Extra arguments go to pytest.
exec bash "$(dirname "$0")/setup_env.sh" -m pytest -q -m "not slow" "$@"
