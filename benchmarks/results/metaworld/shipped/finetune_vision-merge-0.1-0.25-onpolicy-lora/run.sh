#!/bin/bash
# issue 48: a LoRA adapter (rank 32, heads whole) of the shipped MetaWorld policy for vision:diverse_merge:0.1@0.25
# (merged inside both towers after a quarter of their blocks, weighed by its group sizes there and in the language
# model), on 40 on-policy episodes a task (driven under the setting, labelled by the policy unreduced), the recipe of
# ../finetune_vision-0.1-0.25-onpolicy-lora/ with only the setting changed, trained with OpenVLA-OFT's pass as
# predict_action runs it; shipped as metaworld-vision-diverse_merge-0.1-0.25; one core (CORE, default 1); OUT: the
# run's folder (default outputs/metaworld_finetune_vision-merge-0.1-0.25; the same command again resumes it)
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} vla_scripts/train_metaworld_policy.py \
  --output_dir ${OUT:-outputs/metaworld_finetune_vision-merge-0.1-0.25} \
  --init_oft prismatic_tr/assets/metaworld_policy --setting vision:diverse_merge:0.1@0.25 --onpolicy_episodes 40 \
  --lora_rank 32 --max_steps 600 --save_steps 200 --learning_rate 5e-4 --lr_warmup_steps 50 \
  --eval_workers 1 --bf16_autocast false --progress false \
  --install_dir prismatic_tr/assets/adapters/metaworld-vision-diverse_merge-0.1-0.25
