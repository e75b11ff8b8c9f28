#!/bin/bash
# issue 48: a LoRA adapter (rank 32, heads whole) of the shipped MetaWorld policy for diverse:0.1, on round 1's on-policy episodes (40 a task), shipped
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} .venv/bin/python vla_scripts/train_metaworld_policy.py --output_dir /work/runs/mw/lora_proj \
  --init_oft prismatic_tr/assets/metaworld_policy --setting diverse:0.1 --onpolicy_episodes 40 \
  --lora_rank 32 --max_steps 600 --save_steps 200 --learning_rate 5e-4 --lr_warmup_steps 50 \
  --eval_workers 1 --bf16_autocast false --progress false --install_dir prismatic_tr/assets/adapters/metaworld-projector-diverse-0.1
