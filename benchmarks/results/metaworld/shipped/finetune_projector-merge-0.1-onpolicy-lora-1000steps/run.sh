#!/bin/bash
# issue 48: the projector adapter's recipe (../finetune_projector-merge-0.1-onpolicy-lora/) trained for 1000 steps
# (the cosine schedule over them, checkpoints every 200 chosen on validation with the per-task floor) on the same 40
# on-policy episodes a task (DATA: that run's <OUT>/data, copied in when given; else made again, the same seeds);
# one core (CORE, default 1); OUT: the run's folder (default outputs/metaworld_finetune_projector-merge-0.1-1000steps;
# the same command again resumes it)
cd "$(dirname "$0")/../../../../.."
OUT=${OUT:-outputs/metaworld_finetune_projector-merge-0.1-1000steps}
if [ -n "$DATA" ] && [ ! -e "$OUT/data" ]; then mkdir -p "$OUT" && cp -r "$DATA" "$OUT/data"; fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} vla_scripts/train_metaworld_policy.py \
  --output_dir "$OUT" \
  --init_oft prismatic_tr/assets/metaworld_policy --setting diverse_merge:0.1 --onpolicy_episodes 40 \
  --lora_rank 32 --max_steps 1000 --save_steps 200 --learning_rate 5e-4 --lr_warmup_steps 50 \
  --eval_workers 1 --bf16_autocast false --progress false
