#!/bin/bash
# issue 48: DAgger's aggregation: round 1's fine-tune trained on round 1's and round 2's on-policy episodes (both labelled by the shipped policy)
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c 1 .venv/bin/python vla_scripts/train_metaworld_policy.py --output_dir /work/runs/mw/onp3_vis \
  --init_oft /work/runs/mw/onp_vis/policy --onpolicy_teacher prismatic_tr/assets/metaworld_policy \
  --setting vision:diverse:0.1@0.25 --onpolicy_episodes 20 --onpolicy_seed 200000 \
  --onpolicy_aggregate "[/work/runs/mw/onp_vis/data]" \
  --max_steps 600 --save_steps 200 --learning_rate 1e-4 --lr_warmup_steps 50 \
  --eval_workers 1 --bf16_autocast false --progress false
