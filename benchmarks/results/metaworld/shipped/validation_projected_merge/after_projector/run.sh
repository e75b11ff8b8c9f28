#!/bin/bash
# issue 48: diverse_merge at the projector site with each group averaged after the projector
# (benchmarks/metaworld_projected_merge.py --after_projector), keep 0.5, all ten MT10 tasks, validation (30
# episodes a task, the seeds of ../validation_merge_groups/), the shipped MetaWorld policy, one worker on one core
# (CORE, default 0); nothing timed.
cd "$(dirname "$0")/../../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_projected_merge.py --after_projector -- \
  --settings "[none,diverse_merge:0.5]" \
  --tasks "[reach-v3,push-v3,pick-place-v3,peg-insert-side-v3,door-open-v3,drawer-open-v3,drawer-close-v3,button-press-topdown-v3,window-open-v3,window-close-v3]" \
  --split validation --episodes 30 --workers 1 --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_projected_merge/after_projector
