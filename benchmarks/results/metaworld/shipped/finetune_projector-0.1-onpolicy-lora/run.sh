#!/bin/bash
# issue 48 (on the policy issue 47 ships, chosen with the per-task floor): a LoRA adapter (rank 32, heads whole) of the shipped MetaWorld policy for diverse:0.1, on 40 on-policy episodes a task (driven under the setting, labelled by the policy unreduced), shipped
# (run before the fix that made OpenVLA-OFT's training pass a top-level call: this command now trains the fixed pass and
# would not remake these weights; the adapter it installed is withdrawn, ../finetune_*-merge-*-lora/ ship instead)
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} .venv/bin/python vla_scripts/train_metaworld_policy.py --output_dir /work/runs/mw/lora2_proj \
  --init_oft prismatic_tr/assets/metaworld_policy --setting diverse:0.1 --onpolicy_episodes 40 \
  --lora_rank 32 --max_steps 600 --save_steps 200 --learning_rate 5e-4 --lr_warmup_steps 50 \
  --eval_workers 1 --bf16_autocast false --progress false --install_dir prismatic_tr/assets/adapters/metaworld-projector-diverse-0.1
