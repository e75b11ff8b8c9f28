#!/bin/bash
# issue 48: diverse_merge_keys (the vision site's cover on the next block's attention keys) on the bundled tabletop
# policy's validation episodes (the seeds of ../val_vision_merge/, which holds vision:diverse_merge's rows); one core
# (CORE, default 1), nothing timed that means anything (--timing_runs 1)
cd "$(dirname "$0")/../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} vla_scripts/eval_policy.py --split validation --episodes 100 \
  --methods "[]" --settings vision:diverse_merge_keys:0.25@0.25 vision:diverse_merge_keys:0.1@0.25 \
  --timing_runs 1 --num_threads 1 --progress false --output_dir benchmarks/results/selection/val_vision_keys
