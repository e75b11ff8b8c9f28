#!/bin/bash
# issue 48: diverse_merge:0.5 at the projector site with its groups grown by merging the most alike pairs
# (benchmarks/metaworld_pair_merge.py) on the four tasks keep 0.5 loses most, validation (50 episodes a task, the seeds
# of ../../validation_hard50/), the shipped MetaWorld policy, float32, one worker on one core (CORE, default 0);
# nothing timed. The unreduced jobs are ../../validation_hard50/'s (a plain run's: the patch changes only
# reduced calls, tests/envs/test_pair_merge.py), copied into this folder's journal under this run's identity by
# benchmarks/metaworld_seed_unreduced.py before the first run.
cd "$(dirname "$0")/../../../../../.."
OUT=benchmarks/results/metaworld/shipped/validation_pair_merge/hard
[ -f $OUT/episodes.jsonl ] || ${PYTHON:-.venv/bin/python} benchmarks/metaworld_seed_unreduced.py --output_dir $OUT \
  --patch '{"pair_merge": true}' --sources benchmarks/results/metaworld/shipped/validation_hard50/episodes.jsonl || exit
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_pair_merge.py -- \
  --settings "[none,diverse_merge:0.5]" --tasks "[reach-v3,push-v3,pick-place-v3,door-open-v3]" \
  --split validation --episodes 50 --workers 1 --num_threads 1 --timing_runs 0 --progress false --output_dir $OUT
