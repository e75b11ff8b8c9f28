#!/bin/bash
# issue 48: diverse_merge (diverse's cover, each kept token the mean of the tokens nearest to it) against diverse at keep 0.25 and 0.1, projector site, on validation (10 episodes a task), the shipped policy
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} .venv/bin/python vla_scripts/eval_metaworld.py --settings none diverse:0.25 diverse_merge:0.25 diverse:0.1 diverse_merge:0.1 \
  --split validation --episodes 10 --workers 1 --num_threads 1 --timing_runs 0 --progress false --output_dir benchmarks/results/metaworld/shipped/validation_merge
