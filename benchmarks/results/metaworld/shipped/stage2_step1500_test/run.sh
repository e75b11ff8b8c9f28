#!/bin/bash
# issue 47: stage 2's step-1500 checkpoint (the one a "every task >= 7 of 10 on validation" floor rule picks) on the test split
cd /work/main
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec .venv/bin/python vla_scripts/eval_metaworld.py --vla_path /work/runs/mw/ft1/checkpoints/step_1500 --split test \
  --episodes 50 --settings "[none]" --timing_runs 0 --workers 1 --num_threads 1 \
  --output_dir benchmarks/results/metaworld/shipped/stage2_step1500_test --progress false
