#!/bin/bash
# issue 48: diverse_merge against diverse at the vision site (after 1/4 of the towers' blocks) on the bundled tabletop
# policy's validation episodes (the same seeds as ../val_merge/, which compared them at the projector site), for the
# rule that the default changes only with a win on validation on both MetaWorld and the tabletop task; one core
# (CORE, default 1), nothing timed that means anything (--timing_runs 1, beside other work)
cd "$(dirname "$0")/../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} vla_scripts/eval_policy.py --split validation --episodes 100 \
  --methods "[]" --settings vision:diverse:0.25@0.25 vision:diverse_merge:0.25@0.25 vision:diverse:0.1@0.25 \
  vision:diverse_merge:0.1@0.25 --timing_runs 1 --num_threads 1 --progress false \
  --output_dir benchmarks/results/selection/val_vision_merge
