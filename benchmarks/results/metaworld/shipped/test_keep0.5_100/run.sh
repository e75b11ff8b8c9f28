#!/bin/bash
# issue 48: keep 0.5 at both sites (the table's diverse_merge rows, chosen on validation before 2026-12-01) and the
# unreduced policy on 100 test episodes a task, 1,000 in all: the table's 50 a task (seeds 3,000,000-3,000,049) again,
# and 50 never run before (3,000,050-3,000,099); the shipped MetaWorld policy, float32, untimed. Decided before it
# ran: every figure is reported, the table's 500-episode rows stay the issue's measurement, and nothing is chosen here.
cd "$(dirname "$0")/../../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
exec ${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py --split test --episodes 100 \
  --settings "[none,diverse_merge:0.5,vision:diverse_merge:0.5@0.25]" \
  --timing_runs 0 --workers ${WORKERS:-2} --output_dir benchmarks/results/metaworld/shipped/test_keep0.5_100 --progress false "$@"
