#!/bin/bash
# issue 48: on-policy self-distillation of the shipped MetaWorld policy under diverse:0.1
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c 0 .venv/bin/python vla_scripts/train_metaworld_policy.py --output_dir /work/runs/mw/onp_proj \
  --init_oft prismatic_tr/assets/metaworld_policy --setting diverse:0.1 --onpolicy_episodes 40 \
  --max_steps 600 --save_steps 200 --learning_rate 1e-4 --lr_warmup_steps 50 \
  --eval_workers 1 --bf16_autocast false --progress false
