#!/bin/bash
# The default switch to diverse_merge (issue 48: the default changes only with a win on validation): diverse_merge
# against diverse on the bundled OpenVLA-OFT-style tabletop policy's validation episodes, at both sites and the
# shipped OFT adapter's cut (1/20 of the towers); one core (CORE, default 1), nothing timed that means anything
# (--timing_runs 1, beside other work)
cd "$(dirname "$0")/../../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec taskset -c ${CORE:-1} ${PYTHON:-.venv/bin/python} vla_scripts/eval_policy.py \
  --vla_path prismatic_tr/assets/tabletop_oft_policy --split validation --episodes 200 --methods "[]" \
  --settings diverse:0.25 diverse_merge:0.25 diverse:0.1 diverse_merge:0.1 vision:diverse:0.25@0.25 \
  vision:diverse_merge:0.25@0.25 vision:diverse:0.1@0.25 vision:diverse_merge:0.1@0.25 vision:diverse:0.1@0.05 \
  vision:diverse_merge:0.1@0.05 --timing_runs 1 --num_threads 1 --progress false \
  --output_dir benchmarks/results/oft_policy/val_merge
