#!/bin/bash
# issue 48: diverse_merge_keys at the vision site (diverse_merge with its cover chosen on the next block's attention
# keys), training-free, on validation (10 episodes a task), the shipped policy, unreduced first; two workers, one
# thread each
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec ${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py --settings none \
  vision:diverse_merge_keys:0.5@0.25 vision:diverse_merge_keys:0.25@0.25 vision:diverse_merge_keys:0.1@0.25 \
  --split validation --episodes 10 --workers 2 --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_vision_keys
