#!/bin/bash
# issue 48: diverse_merge_keys at the vision site on the bundled tabletop policy's held-out test episodes, reported
# (its choice was made on validation: ../val_vision_keys/); the seeds of ../eval_test.json, which holds
# vision:diverse_merge's rows; one core (CORE, default 1), nothing timed that means anything (--timing_runs 1)
cd "$(dirname "$0")/../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} vla_scripts/eval_policy.py --split test --episodes 100 \
  --methods "[]" --settings vision:diverse_merge_keys:0.25@0.25 vision:diverse_merge_keys:0.1@0.25 \
  --timing_runs 1 --num_threads 1 --progress false --output_dir benchmarks/results/selection/test_vision_keys
