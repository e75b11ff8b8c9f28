#!/bin/bash
# issue 48: diverse_merge at the projector site as shipped (each group averaged before the projector), keeps 0.5 /
# 0.25, on the six MT10 tasks ../validation_merge_groups/hard_mean/ did not run, validation (30 episodes a task, the
# same seeds); the unreduced jobs are ../validation_merge_groups/others_mean/'s, reused through a copy of its journal;
# the shipped MetaWorld policy, one worker on one core (CORE, default 1); nothing timed.
cd "$(dirname "$0")/../../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_projected_merge.py -- \
  --settings "[none,diverse_merge:0.5,diverse_merge:0.25]" \
  --tasks "[door-open-v3,drawer-open-v3,drawer-close-v3,button-press-topdown-v3,window-open-v3,window-close-v3]" \
  --split validation --episodes 30 --workers 1 --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_projected_merge/before_projector_others
