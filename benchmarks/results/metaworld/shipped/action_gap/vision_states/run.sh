#!/bin/bash
# issue 48: how far each setting moves the shipped MetaWorld policy's action chunk, on 500 recorded states of its
# on-policy episodes under vision:diverse_merge:0.1@0.25 (40 a task, demonstrations split; made in DATA_ROOT when missing, ~25 minutes a core,
# the same job as the vision-diverse_merge-0.1-0.25 adapter's recipe, whose <output_dir>/data can be given); one thread; nothing timed.
cd "$(dirname "$0")/../../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec ${PYTHON:-.venv/bin/python} benchmarks/metaworld_action_gap.py --driver vision:diverse_merge:0.1@0.25 \
  --data_root "${DATA_ROOT:-outputs/metaworld_onpolicy/vision-diverse_merge-0.1-0.25}" --states 500 --every 8 \
  --settings diverse:0.5 diverse:0.25 diverse_merge:0.5 diverse_merge:0.25 diverse_merge:0.1 llm:attention:0.5@0.25 \
  vision:diverse:0.25@0.25 vision:diverse_merge:0.5@0.25 vision:diverse_merge:0.25@0.25 vision:diverse_merge:0.1@0.25 \
  vision:diverse_merge_keys:0.5@0.25 vision:diverse_merge_keys:0.25@0.25 vision:diverse_merge_keys:0.1@0.25 \
  --output benchmarks/results/metaworld/shipped/action_gap/vision_states/gaps.json
