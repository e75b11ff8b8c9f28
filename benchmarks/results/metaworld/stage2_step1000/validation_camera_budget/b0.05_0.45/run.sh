#!/bin/bash
# issue 48: keep 0.25 at the projector site with the budgets 0.05,0.45 (corner3, gripperPOV) (each camera its own
# max-min cover), the shipped MetaWorld policy, validation. The unreduced jobs are the validation_keep0.25 run's,
# reused through the journal (the same checkpoint, split and seeds).
cd "$(dirname "$0")/../../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec .venv/bin/python benchmarks/metaworld_camera_budget.py --budgets 0.05,0.45 -- --split validation --episodes 10 \
  --settings "[none,diverse:0.25]" --timing_runs 0 --workers 1 --num_threads 1 \
  --output_dir benchmarks/results/metaworld/stage2_step1000/validation_camera_budget/b0.05_0.45 --progress false
