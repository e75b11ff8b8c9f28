#!/bin/bash
# issue 48: a second round of on-policy self-distillation: round 1's fine-tune drives under vision:diverse:0.1@0.25, the shipped policy labels
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c 1 .venv/bin/python vla_scripts/train_metaworld_policy.py --output_dir /work/runs/mw/onp2_vis \
  --init_oft /work/runs/mw/onp_vis/policy --onpolicy_teacher prismatic_tr/assets/metaworld_policy \
  --setting vision:diverse:0.1@0.25 --onpolicy_episodes 20 --onpolicy_seed 200000 \
  --max_steps 300 --save_steps 300 --learning_rate 1e-4 --lr_warmup_steps 30 --select_episodes 0 \
  --eval_workers 1 --bf16_autocast false --progress false
