#!/bin/bash
# issue 48: the shipped projector adapter's recipe trained 2.5x longer (1500 steps, checkpoints every 300) on the same 40 on-policy episodes a task (its data copied from lora2_proj: the same job is not made twice); installed outside the package until it is compared
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} .venv/bin/python vla_scripts/train_metaworld_policy.py --output_dir /work/runs/mw/lora3_proj \
  --init_oft prismatic_tr/assets/metaworld_policy --setting diverse:0.1 --onpolicy_episodes 40 \
  --lora_rank 32 --max_steps 1500 --save_steps 300 --learning_rate 5e-4 --lr_warmup_steps 50 \
  --eval_workers 1 --bf16_autocast false --progress false --install_dir /work/runs/mw/lora3_proj/install
