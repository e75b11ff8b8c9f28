#!/bin/bash
# issue 48: diverse_merge_keys at the vision site, keeps 0.5 / 0.25, on the four tasks reduction costs most, validation
# (30 episodes a task: the seeds of ../validation_merge_groups/hard_mean, which holds vision:diverse_merge's rows),
# the shipped MetaWorld policy, unreduced first; two workers, one thread each; nothing timed.
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec ${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py \
  --settings "[none,vision:diverse_merge_keys:0.5@0.25,vision:diverse_merge_keys:0.25@0.25]" \
  --tasks "[reach-v3,push-v3,pick-place-v3,peg-insert-side-v3]" --split validation --episodes 30 --workers 2 \
  --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_vision_keys_hard
