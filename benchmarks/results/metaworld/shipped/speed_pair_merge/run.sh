#!/bin/bash
# issue 48: what pair_merge costs against diverse_merge (and diverse, diverse_merge_keys), end to end (the whole predict_action at batch 1, interleaved
# against unreduced): on the shipped MetaWorld policy in float32 (one reach episode runs; the timing is taken on its
# first observation) and on cpu-bench-oft (real-size towers, 8-layer Llama, random weights) in --dtype auto.
# Run on a quiet machine: nothing else may run while it times.
cd "$(dirname "$0")/../../../../.."
export MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
out=benchmarks/results/metaworld/shipped/speed_pair_merge
${PYTHON:-.venv/bin/python} vla_scripts/eval_metaworld.py --split validation --episodes 1 --tasks "[reach-v3]" \
  --settings "[none,diverse_merge:0.5,pair_merge:0.5,diverse:0.5,diverse_merge:0.25,pair_merge:0.25,diverse:0.25,diverse_merge:0.1,pair_merge:0.1,diverse:0.1,vision:diverse_merge:0.5@0.25,vision:pair_merge:0.5@0.25,vision:diverse_merge_keys:0.5@0.25,vision:diverse:0.5@0.25,vision:diverse_merge:0.25@0.25,vision:pair_merge:0.25@0.25,vision:diverse_merge_keys:0.25@0.25,vision:diverse:0.25@0.25,vision:diverse_merge:0.1@0.25,vision:pair_merge:0.1@0.25,vision:diverse_merge_keys:0.1@0.25,vision:diverse:0.1@0.25]" \
  --timing_runs 50 --workers 1 --resume false --progress false --output_dir $out/policy || exit
exec ${PYTHON:-.venv/bin/python} vla_scripts/benchmark.py --preset cpu-bench-oft --dtype auto \
  --settings "[diverse_merge:0.5,pair_merge:0.5,diverse_merge:0.25,pair_merge:0.25,vision:diverse_merge:0.25@0.25,vision:pair_merge:0.25@0.25]" \
  --num_runs 10 --progress false --output_dir $out/cpu-bench-oft
