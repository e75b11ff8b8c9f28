#!/usr/bin/env bash
# Fine-tune the bundled tabletop policy with a reduction setting attached (LoRA, self-distilled from the unreduced
# policy), measure success on the validation split at every checkpoint (the curve), choose the best checkpoint on
# validation, and measure it once on the test split.
#   bash scripts/finetune_reduced.sh vision:diverse:0.1@0.25 1600 400    # setting (spec) steps save_every
#   bash scripts/finetune_reduced.sh diverse:0.1 1600 400                # the projector site
#   bash scripts/finetune_reduced.sh vision:learned:0.1@0.25 1600 400    # + a scorer trained with the policy
# The setting is one spec of prismatic_tr.vla.spec (one site: projector or vision), as finetune.py --token_reduction.spec.
# Every evaluation runs the setting the checkpoint carries (prismatic-tr-eval-policy --settings own: a learned scorer
# as trained). The checkpoint chosen: prismatic-tr-choose-checkpoint (prismatic_tr.policy.checkpoint_choice).
# Environment: DISTILL (distillation weight, default 1, for POLICY=oft on-policy runs 0; 0 = behaviour cloning
# only: name -bc, unless on-policy), LR (5e-4), SCHEDULE (cosine),
# VAL_EPISODES (100), TEST_EPISODES (100), DATA (demonstrations dir), PYTHON (the environment's python: its
# console scripts prismatic-tr-* beside it run every step), SKIP_TRAINING (1: only evaluate a finished run),
# ONPOLICY (N > 0: train on N on-policy episodes, seeds 3000 on of the demonstrations split, driven by the reduced
# policy and labelled by the unreduced one: prismatic-tr-make-onpolicy-data; 0: on the demonstrations).
# Writes outputs/finetune_reduced/[oft-]<site>-<method>-<keep>[-<depth>][-bc | -d<DISTILL> unless the default][-onpolicy]/: the run's checkpoints, eval_val_<step>/,
# chosen.txt, adapter/ (the chosen one as shipped) and eval_test/ (its test success). Demonstrations: the recipe's 3000 (seeds 0-2999 of the demonstration split).
# OUT_DIR: the output folder instead; it must hold no earlier run (exit 2 naming it, before any work), and with
# SKIP_TRAINING=1 exactly one. The records keep the chosen adapter's setting (token_reduction.json: a learned scorer as trained).
# Ship the chosen adapter: INSTALL_DIR=prismatic_tr/assets/adapters/<name> (prismatic_tr/policy/adapters.py).
# POLICY=oft: the bundled OpenVLA-OFT-style policy instead (two cameras, proprio, chunks of 8, L1 head): its
# demonstrations (seeds 0-1999, both cameras), L1 loss on the chunk, distillation on the teacher's chunk, LoRA on the
# towers, projector and Llama with the heads trained whole; names and records get the prefix oft-.
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC=${1:?setting, e.g. vision:diverse:0.1@0.25}; STEPS=${2:-1600}; EVERY=${3:-400}
PY=${PYTHON:-.venv/bin/python}; LR=${LR:-5e-4}; SCHEDULE=${SCHEDULE:-cosine}
BIN=$(dirname "$(command -v "$PY" || echo "$PY")")  # the environment's console scripts (prismatic-tr-*)
VAL_EPISODES=${VAL_EPISODES:-100}; TEST_EPISODES=${TEST_EPISODES:-100}; ONPOLICY=${ONPOLICY:-0}
POLICY=${POLICY:-openvla}
fail() { echo "finetune_reduced.sh: error: $*" >&2; exit 2; }
# the spec's parts, for the run's name (prismatic_tr.vla.spec checks the rest when training starts)
IFS=: read -r -a FIELDS <<< "$SPEC"
case "${FIELDS[0]}" in projector|vision|llm) SITE=${FIELDS[0]}; FIELDS=("${FIELDS[@]:1}");; *) SITE=projector;; esac
if [ ${#FIELDS[@]} -ne 2 ] || [[ "$SPEC" == *+* ]]; then
  fail "setting $SPEC is not one site's [site:]method:keep[@depth] (e.g. vision:diverse:0.1@0.25, diverse:0.1)"
fi
METHOD=${FIELDS[0]}; KEEP=${FIELDS[1]%%@*}; DEPTH=none; if [[ "${FIELDS[1]}" == *@* ]]; then DEPTH=${FIELDS[1]#*@}; fi
case "$POLICY" in
  openvla) BASE=prismatic_tr/assets/tabletop_policy; DATASET=tabletop_pick; PREFIX=""
           DEMO_FLAGS=(--num_episodes 3000); DEFAULT_DATA=outputs/finetune_reduced/data;;
  oft) BASE=prismatic_tr/assets/tabletop_oft_policy; DATASET=tabletop_pick_oft; PREFIX="oft-"
       DEMO_FLAGS=(--num_episodes 2000 --third_person true --dataset_name tabletop_pick_oft)
       DEFAULT_DATA=outputs/finetune_reduced/data_oft;;
  *) fail "POLICY=$POLICY is not allowed; use openvla or oft";;
esac
# an OFT policy's on-policy labels are the unreduced policy's own chunks on the same images: distilling to that
# chunk again would repeat them, so there the default is 0 (and the run is not called -bc: its labels are the teacher's)
OFT_ONPOLICY=0; if [ "$POLICY" = oft ] && [ "$ONPOLICY" != 0 ]; then OFT_ONPOLICY=1; fi
if [ "$OFT_ONPOLICY" = 1 ]; then DISTILL=${DISTILL:-0}; else DISTILL=${DISTILL:-1}; fi
NAME="$PREFIX$SITE-$METHOD-$KEEP"
if [ "$DEPTH" != none ]; then NAME="$NAME-$DEPTH"; fi
if [ "$DISTILL" = 0 ] && [ "$OFT_ONPOLICY" = 0 ]; then NAME="$NAME-bc"
elif [ "$DISTILL" != 0 ] && [ "$DISTILL" != 1 ]; then NAME="$NAME-d$DISTILL"
elif [ "$DISTILL" = 1 ] && [ "$OFT_ONPOLICY" = 1 ]; then NAME="$NAME-d1"; fi
if [ "$ONPOLICY" != 0 ]; then NAME="$NAME-onpolicy"; fi
OUT=${OUT_DIR:-outputs/finetune_reduced/$NAME}
DATA=${DATA:-$DEFAULT_DATA}
case "$SITE" in projector|vision) ;; *) fail "site $SITE is not allowed; use projector or vision";; esac
for V in STEPS EVERY ONPOLICY VAL_EPISODES TEST_EPISODES; do [[ "${!V}" =~ ^[0-9]+$ ]] || fail "$V=${!V} is not allowed; use an integer >= 0"; done
# one run a folder, checked before any work: a second run beside an earlier one would mix their checkpoints and
# evaluations (the chosen checkpoint could be the earlier run's)
RUNS=(); if [ -d "$OUT/runs" ]; then mapfile -t RUNS < <(find "$OUT/runs" -mindepth 1 -maxdepth 1 -type d | sort); fi
if [ "${SKIP_TRAINING:-0}" = 0 ]; then
  if [ ${#RUNS[@]} -gt 0 ]; then fail "$OUT already holds a run (${RUNS[*]}); move it away or name another OUT_DIR"; fi
  for D in "$OUT"/eval_val_step_* "$OUT/eval_test" "$OUT/adapter"; do
    if [ -e "$D" ]; then fail "$OUT already holds results of another run ($D); move them away or name another OUT_DIR"; fi
  done
elif [ ${#RUNS[@]} -ne 1 ]; then
  fail "SKIP_TRAINING=1 evaluates the one run in $OUT/runs, and it holds ${#RUNS[@]} (${RUNS[*]:-none})"
fi
if [ "$ONPOLICY" = 0 ] && [ ! -f "$DATA/$DATASET/demos.json" ]; then  # on-policy runs need no demonstrations
  "$BIN/prismatic-tr-make-demos" "${DEMO_FLAGS[@]}" --min_objects 1 --max_objects 5 --motion_noise 0.2 --output_dir "$DATA"
fi
if [ "${SKIP_TRAINING:-0}" = 0 ]; then  # SKIP_TRAINING=1: evaluate, choose and install a finished run
START=$(date +%s); mkdir -p "$OUT"
TRAIN_DATA=("$DATA")
if [ "$ONPOLICY" != 0 ]; then  # DAgger-style: the reduced policy drives, the unreduced one labels (counts as training)
  "$BIN/prismatic-tr-make-onpolicy-data" --vla_path "$BASE" --setting "$SPEC" --num_episodes "$ONPOLICY" --seed 3000 \
    --output_dir "$OUT/onpolicy_data" --num_threads 2 2>&1 | tee "$OUT/onpolicy.log"
  TRAIN_DATA=("$OUT/onpolicy_data" --norm_stats_from_vla true)
fi
"$BIN/prismatic-tr-finetune" --vla_path "$BASE" --data_root_dir "${TRAIN_DATA[@]}" \
  --dataset_name "$DATASET" --token_reduction.spec "$SPEC" --batch_size 16 --max_steps "$STEPS" \
  --save_steps "$EVERY" --save_latest_checkpoint_only false --learning_rate "$LR" --lr_schedule "$SCHEDULE" \
  --lora_rank 32 --distill_weight "$DISTILL" --shuffle_buffer_size 20000 --seed 7 --run_root_dir "$OUT/runs" \
  --progress_bar false --log_every 50 2>&1 | tee "$OUT/training.log"
echo "training wall: $(( $(date +%s) - START )) s" | tee "$OUT/training_wall.txt"
fi
mapfile -t RUNS < <(find "$OUT/runs" -mindepth 1 -maxdepth 1 -type d | sort)
if [ ${#RUNS[@]} -ne 1 ]; then fail "$OUT/runs should hold this run only, and holds ${#RUNS[@]} (${RUNS[*]:-none})"; fi
RUN="${RUNS[0]}/"
for CKPT in "$RUN"checkpoints/step_*; do
  "$BIN/prismatic-tr-eval-policy" --vla_path "$CKPT" --split validation --episodes "$VAL_EPISODES" --methods "[]" \
    --settings own --timing_runs 1 --num_threads 2 --progress false --output_dir "$OUT/eval_val_$(basename "$CKPT")"
done
# the checkpoint with the most validation successes under the setting (the later step among equals: the rule of
# every recipe, prismatic_tr.policy.checkpoint_choice)
CHOSEN=$("$BIN/prismatic-tr-choose-checkpoint" "$RUN" "$OUT" --episodes "$VAL_EPISODES" --record "$OUT/selection.json")
echo "$CHOSEN" > "$OUT/chosen.txt"; echo "chosen on validation: $CHOSEN"
# the chosen adapter as it ships (float16 weights), measured once on the test split
"$BIN/prismatic-tr-adapters" install "$CHOSEN" "$OUT/adapter"
"$BIN/prismatic-tr-eval-policy" --adapter "$OUT/adapter" --split test --episodes "$TEST_EPISODES" --methods "[]" --settings own \
  --timing_runs 1 --num_threads 2 --progress false --output_dir "$OUT/eval_test"
"$BIN/prismatic-tr-adapters" install "$CHOSEN" "$OUT/adapter" --results "$OUT"
if [ -n "${INSTALL_DIR:-}" ]; then
  mkdir -p "$INSTALL_DIR" && cp "$OUT"/adapter/* "$INSTALL_DIR"/ && echo "installed -> $INSTALL_DIR"
fi
# the records, committed: benchmarks/results/finetune_reduced/<name>/
REC=benchmarks/results/finetune_reduced/$NAME; mkdir -p "$REC"
for D in "$OUT"/eval_val_step_* "$OUT/eval_test"; do cp "$D/results.json" "$REC/$(basename "$D").json"; done
grep "prismatic_tr.training: step" "$OUT/training.log" > "$REC/training.log" || true
cp "$OUT/training_wall.txt" "$OUT/chosen.txt" "$OUT/adapter/record.json" "$OUT/adapter/token_reduction.json" "$REC"/
if [ -f "$OUT/onpolicy_data/onpolicy.json" ]; then cp "$OUT/onpolicy_data/onpolicy.json" "$REC"/; fi
