#!/bin/bash
# issue 48: diverse_merge with proportional attention (each merged token weighed by how many patches it stands for,
# prismatic_tr/llm/sizes.py) at the projector site, training-free, on validation (10 episodes a task), the shipped policy
cd "$(dirname "$0")/../../../../.."
export MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec .venv/bin/python vla_scripts/eval_metaworld.py --settings none diverse_merge:0.5 diverse_merge:0.25 diverse_merge:0.1 \
  --split validation --episodes 10 --workers 2 --timing_runs 0 --progress false \
  --output_dir benchmarks/results/metaworld/shipped/validation_proportional
