#!/bin/bash
# issue 48: the test split (50 episodes a task) of the way validation chose at keep 0.5 at the vision site:
# vision:diverse_merge:0.5@0.25 with diverse_merge's groups made the 'representative' way
# (benchmarks/metaworld_merge_groups.py), the shipped MetaWorld policy, one worker on one core (CORE, default 1);
# nothing timed. The unreduced jobs are the reduction table's (../../table/), reused through the journal (the same
# checkpoint, split and seeds).
cd "$(dirname "$0")/../../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_merge_groups.py --groups representative -- \
  --settings "[none,vision:diverse_merge:0.5@0.25]" --split test --episodes 50 --workers 1 --num_threads 1 \
  --timing_runs 0 --progress false --output_dir benchmarks/results/metaworld/shipped/validation_merge_groups/test_representative
