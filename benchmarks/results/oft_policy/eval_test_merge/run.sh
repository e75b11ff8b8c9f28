#!/bin/bash
# Reported, not chosen from: diverse_merge's rows of the OFT-style tabletop policy's test table (../eval_test/ has
# diverse's, on the same seeds), with the 1/20 cut of the shipped OFT adapter; one core (CORE, default 0), not timed
# (--timing_runs 1, beside other work). FIVE=1: the 100 five-object test scenes instead (eval_test_5obj_merge/).
cd "$(dirname "$0")/../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ "${FIVE:-0}" = 1 ]; then EP=(--episodes 100 --min_objects 5 --max_objects 5); OUT=eval_test_5obj_merge
else EP=(--episodes 200); OUT=eval_test_merge; fi
exec taskset -c ${CORE:-0} ${PYTHON:-.venv/bin/python} vla_scripts/eval_policy.py \
  --vla_path prismatic_tr/assets/tabletop_oft_policy --split test "${EP[@]}" --methods "[]" \
  --settings diverse_merge:0.5 diverse_merge:0.25 diverse_merge:0.1 vision:diverse_merge:0.5@0.25 \
  vision:diverse_merge:0.25@0.25 vision:diverse_merge:0.1@0.25 vision:diverse_merge:0.1@0.05 \
  --timing_runs 1 --num_threads 1 --progress false --output_dir benchmarks/results/oft_policy/$OUT
