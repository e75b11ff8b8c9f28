#!/bin/bash
# issue 48: shipped as metaworld-projector-diverse_merge-0.1 (since 2026-11-29); the projector adapter's recipe
# (../finetune_projector-merge-0.1-onpolicy-lora/) trained again from
# another seed (1: the LoRA weights' init and the data order) and for 800 steps (checkpoints every 200, chosen on
# validation with the per-task floor), on 40 on-policy episodes a task made again (the same seeds and setting; the
# record names the run's seed, so the first run's data is not reused); one core (CORE, default 0); OUT: the run's
# folder (default outputs/metaworld_finetune_projector-merge-0.1-seed1; the same command again resumes it)
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} vla_scripts/train_metaworld_policy.py \
  --output_dir ${OUT:-outputs/metaworld_finetune_projector-merge-0.1-seed1} \
  --init_oft prismatic_tr/assets/metaworld_policy --setting diverse_merge:0.1 --onpolicy_episodes 40 \
  --lora_rank 32 --max_steps 800 --save_steps 200 --learning_rate 5e-4 --lr_warmup_steps 50 --seed 1 \
  --eval_workers 1 --bf16_autocast false --progress false \
  --install_dir prismatic_tr/assets/adapters/metaworld-projector-diverse_merge-0.1
