#!/bin/bash
# issue 48: diverse_merge at the vision site (merged inside both towers after 1/4 of their blocks, the later blocks and
# the language model weighing each merged token as its patches), training-free, beside vision:diverse at keep 0.25, on
# validation (10 episodes a task), the shipped policy, unreduced first; one worker on one core (CORE, default 1)
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py --settings none vision:diverse:0.25@0.25 \
  vision:diverse_merge:0.5@0.25 vision:diverse_merge:0.25@0.25 vision:diverse_merge:0.1@0.25 \
  --split validation --episodes 10 --workers 1 --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_vision_merge
