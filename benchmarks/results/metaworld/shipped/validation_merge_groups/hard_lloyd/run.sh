#!/bin/bash
# issue 48: diverse_merge's groups made the 'lloyd' way (benchmarks/metaworld_merge_groups.py), at both sites and keeps
# 0.5 / 0.25, on the four tasks reduction costs most, validation (30 episodes a task), the shipped MetaWorld policy,
# one worker on one core (CORE, default 1); nothing timed.
# The unreduced jobs are hard_mean's, reused through the journal (the same checkpoint, split and seeds).
cd "$(dirname "$0")/../../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_merge_groups.py --groups lloyd -- \
  --settings "[none,diverse_merge:0.5,vision:diverse_merge:0.5@0.25,vision:diverse_merge:0.25@0.25,diverse_merge:0.25]" \
  --tasks "[reach-v3,push-v3,pick-place-v3,peg-insert-side-v3]" --split validation --episodes 30 --workers 1 --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_merge_groups/hard_lloyd
