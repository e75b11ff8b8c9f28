#!/bin/bash
# issue 48: how far each keep-0.5 and keep-0.25 setting moves the shipped MetaWorld policy's action chunk, per task, on
# recorded states of its on-policy episodes under diverse_merge:0.5 (10 a task, demonstrations split; made in
# DATA_ROOT when missing, ~5 minutes a core); every 2nd recorded query (a chunk of 8 each), so every task's episodes
# are in; one thread; nothing timed.
cd "$(dirname "$0")/../../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec ${PYTHON:-.venv/bin/python} benchmarks/metaworld_action_gap.py --driver diverse_merge:0.5 \
  --data_root "${DATA_ROOT:-outputs/metaworld_onpolicy/diverse_merge-0.5-10}" --episodes_per_task 10 --states 600 \
  --every 2 --settings diverse:0.5 diverse_merge:0.5 diverse_merge:0.25 vision:diverse_merge:0.5@0.25 \
  vision:diverse_merge_keys:0.5@0.25 vision:diverse_merge:0.25@0.25 vision:diverse_merge_keys:0.25@0.25 \
  --output benchmarks/results/metaworld/shipped/action_gap/per_task/gaps.json
