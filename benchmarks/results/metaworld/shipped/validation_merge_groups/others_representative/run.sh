#!/bin/bash
# issue 48: vision:diverse_merge:0.5@0.25 with diverse_merge's groups made the 'representative' way
# (benchmarks/metaworld_merge_groups.py), on the six other MT10 tasks, validation (30 episodes a task), the shipped
# MetaWorld policy, one worker on one core (CORE, default 0); nothing timed.
# The unreduced jobs are others_mean's, reused through the journal (the same checkpoint, split and seeds).
cd "$(dirname "$0")/../../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_merge_groups.py --groups representative -- \
  --settings "[none,vision:diverse_merge:0.5@0.25]" \
  --tasks "[door-open-v3,drawer-open-v3,drawer-close-v3,button-press-topdown-v3,window-open-v3,window-close-v3]" --split validation --episodes 30 --workers 1 --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_merge_groups/others_representative
