#!/bin/bash
# issue 48: training-free keep 0.25 on MetaWorld validation: diverse against spatial_pool 2x2 and salient_diverse (projector site), shipped policy
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec .venv/bin/python vla_scripts/eval_metaworld.py --split validation --episodes 10 \
  --settings "[none,diverse:0.25,spatial_pool:2x2,salient_diverse:0.25]" --timing_runs 0 --workers 1 --num_threads 1 \
  --output_dir benchmarks/results/metaworld/stage2_step1000/validation_keep0.25 --progress false
