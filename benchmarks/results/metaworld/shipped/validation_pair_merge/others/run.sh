#!/bin/bash
# issue 48: as ../hard/run.sh on the other six MT10 tasks, the unreduced policy run here too (validation, 50 episodes a
# task, seeds 1,000,000-1,000,049), one worker on one core (CORE, default 1); nothing timed. It was run as two processes
# of three tasks each, one per core, and their journals joined into this folder's; this runs the six in one.
cd "$(dirname "$0")/../../../../../.."
OUT=benchmarks/results/metaworld/shipped/validation_pair_merge/others
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_pair_merge.py -- \
  --settings "[none,diverse_merge:0.5]" \
  --tasks "[drawer-open-v3,drawer-close-v3,button-press-topdown-v3,peg-insert-side-v3,window-open-v3,window-close-v3]" \
  --split validation --episodes 50 --workers 1 --num_threads 1 --timing_runs 0 --progress false --output_dir $OUT
