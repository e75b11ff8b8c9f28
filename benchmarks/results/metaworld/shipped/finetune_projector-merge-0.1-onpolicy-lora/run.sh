#!/bin/bash
# issue 48: a LoRA adapter (rank 32, heads whole) of the shipped MetaWorld policy for diverse_merge:0.1 (merging with
# proportional attention at the projector site), on 40 on-policy episodes a task (driven under the setting, labelled
# by the policy unreduced), the recipe of ../finetune_projector-0.1-onpolicy-lora/ with only the setting changed,
# trained with OpenVLA-OFT's pass as predict_action runs it (the fix of ../prefix_finetune_projector-merge-0.1-onpolicy-lora/);
# shipped as metaworld-projector-diverse_merge-0.1 until 2026-11-29 (replaced by ../finetune_projector-merge-0.1-onpolicy-lora-seed1/,
# which no longer installs from here); one core (CORE, default 0); OUT: the run's folder (default
# outputs/metaworld_finetune_projector-merge-0.1; the same command again resumes it, a finished stage not run again)
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} vla_scripts/train_metaworld_policy.py \
  --output_dir ${OUT:-outputs/metaworld_finetune_projector-merge-0.1} \
  --init_oft prismatic_tr/assets/metaworld_policy --setting diverse_merge:0.1 --onpolicy_episodes 40 \
  --lora_rank 32 --max_steps 600 --save_steps 200 --learning_rate 5e-4 --lr_warmup_steps 50 \
  --eval_workers 1 --bf16_autocast false --progress false
