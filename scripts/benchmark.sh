#!/usr/bin/env bash
# Set up (see setup_env.sh) and run the main job: the policy-step benchmark on the default model.
# Extra arguments go to prismatic-tr-benchmark (vla_scripts/benchmark.py; e.g. --preset tiny).
exec bash "$(dirname "$0")/setup_env.sh" prismatic-tr-benchmark "$@"
