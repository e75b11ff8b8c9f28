#!/bin/bash
# issue 48: diverse_merge at the projector site with a budget per camera (benchmarks/metaworld_camera_budget.py
# --budgets 0.35,0.65: corner3, then gripperPOV; 256 visual tokens, as diverse_merge:0.5), all ten MT10 tasks, validation (30
# episodes a task, the seeds of ../../validation_merge_groups/), the shipped MetaWorld policy, one worker on one core
# (CORE, default 0); nothing timed. The unreduced jobs are ../../validation_merge_groups/hard_mean/'s and
# others_mean/'s (a plain run's: the patch changes only reduced calls, tests/envs/test_camera_budget.py), copied into
# this folder's journal under this run's identity by benchmarks/metaworld_seed_unreduced.py before the first run.
cd "$(dirname "$0")/../../../../../.."
[ -f benchmarks/results/metaworld/shipped/validation_camera_budget_merge/b0.35_0.65/episodes.jsonl ] || ${PYTHON:-.venv/bin/python} benchmarks/metaworld_seed_unreduced.py --output_dir benchmarks/results/metaworld/shipped/validation_camera_budget_merge/b0.35_0.65 \
  --patch '{"camera_budgets": [0.35, 0.65]}' --sources benchmarks/results/metaworld/shipped/validation_merge_groups/hard_mean/episodes.jsonl benchmarks/results/metaworld/shipped/validation_merge_groups/others_mean/episodes.jsonl || exit
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} benchmarks/metaworld_camera_budget.py --budgets 0.35,0.65 -- \
  --settings "[none,diverse_merge:0.5]" \
  --tasks "[reach-v3,push-v3,pick-place-v3,peg-insert-side-v3,door-open-v3,drawer-open-v3,drawer-close-v3,button-press-topdown-v3,window-open-v3,window-close-v3]" \
  --split validation --episodes 30 --workers 1 --num_threads 1 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_camera_budget_merge/b0.35_0.65
