#!/usr/bin/env bash
# Fine-tune the bundled tabletop policy with a reduction setting attached (LoRA), then measure success on the
# validation split at every checkpoint (the curve) and on the test split at the last one.
#   bash scripts/finetune_reduced.sh vision diverse 0.1 0.25 1200 300     # site method keep depth steps save_every
# Writes outputs/finetune_reduced/<site>-<method>-<keep>[-<depth>]/: demonstrations (the recipe's 3000, seeds
# 0-2999 of the demonstration split), the run's checkpoints, eval_val_step_<N>/ and eval_test/.
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${1:?site}; METHOD=${2:?method}; KEEP=${3:?keep}; DEPTH=${4:-none}; STEPS=${5:-1200}; EVERY=${6:-300}
PY=${PYTHON:-.venv/bin/python}
NAME="$SITE-$METHOD-$KEEP$([ "$DEPTH" != none ] && echo "-$DEPTH")"
OUT=outputs/finetune_reduced/$NAME
DATA=${DATA:-outputs/finetune_reduced/data}
if [ ! -f "$DATA/tabletop_pick/demos.json" ]; then
  $PY vla_scripts/make_demos.py --num_episodes 3000 --min_objects 1 --max_objects 5 --motion_noise 0.2 --output_dir "$DATA"
fi
DEPTH_FLAG=(); SPEC="$METHOD:$KEEP"
if [ "$SITE" = vision ]; then DEPTH_FLAG=(--token_reduction.depth_fraction "$DEPTH"); SPEC="vision:$METHOD:$KEEP@$DEPTH"; fi
$PY vla_scripts/finetune.py --vla_path prismatic_tr/assets/tabletop_policy --data_root_dir "$DATA" \
  --dataset_name tabletop_pick --token_reduction.site "$SITE" --token_reduction.method "$METHOD" \
  --token_reduction.reduction_ratio "$KEEP" "${DEPTH_FLAG[@]}" --batch_size 16 --max_steps "$STEPS" \
  --save_steps "$EVERY" --save_latest_checkpoint_only false --learning_rate 5e-4 --lora_rank 32 \
  --shuffle_buffer_size 20000 --seed 7 --run_root_dir "$OUT/runs" --progress_bar false --log_every 50
RUN=$(ls -d "$OUT"/runs/*/ | head -1)
for CKPT in "$RUN"checkpoints/step_*; do
  $PY vla_scripts/eval_policy.py --vla_path "$CKPT" --split validation --episodes 100 --methods "[]" \
    --settings "$SPEC" --timing_runs 1 --num_threads 2 --progress false --output_dir "$OUT/eval_val_$(basename "$CKPT")"
done
LAST=$(ls -d "$RUN"checkpoints/step_* | sort | tail -1)
$PY vla_scripts/eval_policy.py --vla_path "$LAST" --split test --episodes 100 --methods "[]" --settings "$SPEC" \
  --timing_runs 1 --num_threads 2 --progress false --output_dir "$OUT/eval_test"
# Ship a checkpoint (chosen on the validation curve): INSTALL_STEP=300 INSTALL_DIR=prismatic_tr/assets/<name>
if [ -n "${INSTALL_STEP:-}" ] && [ -n "${INSTALL_DIR:-}" ]; then
  SRC="$RUN"checkpoints/step_$(printf %06d "$INSTALL_STEP")
  mkdir -p "$INSTALL_DIR"
  cp "$SRC"/{config.json,model.safetensors,dataset_statistics.json,preprocessor_config.json,tokenizer.json,tokenizer_config.json} "$INSTALL_DIR"/
  echo "installed $SRC -> $INSTALL_DIR"
fi
