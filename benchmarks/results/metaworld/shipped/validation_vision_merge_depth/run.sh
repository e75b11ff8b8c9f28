#!/bin/bash
# issue 48: the vision site's merge cut later (after half of both towers' blocks instead of a quarter), training-free,
# on validation (10 episodes a task, the seeds of ../validation_vision_merge/, whose @0.25 rows it sits beside), the
# shipped policy; one worker on one core (CORE, default 0)
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py --settings none \
  vision:diverse_merge:0.5@0.5 vision:diverse_merge:0.25@0.5 vision:diverse_merge:0.1@0.5 \
  --split validation --episodes 10 --workers 1 --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_vision_merge_depth
