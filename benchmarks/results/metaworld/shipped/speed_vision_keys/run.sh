#!/bin/bash
# issue 48: what diverse_merge_keys costs at the vision site against vision:diverse_merge, end to end (the whole
# predict_action at batch 1, float32, interleaved against unreduced): on the shipped MetaWorld policy (one reach episode
# runs; the timing is taken on its first observation) and on cpu-bench-oft (real-size towers, 8-layer Llama), as
# ../speed_vision_merge/ does. Run on a quiet machine: nothing else may run while it times.
cd "$(dirname "$0")/../../../../.."
export MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa
out=benchmarks/results/metaworld/shipped/speed_vision_keys
.venv/bin/python vla_scripts/eval_metaworld.py --split validation --episodes 1 --tasks "[reach-v3]" \
  --settings "[none,vision:diverse_merge:0.5@0.25,vision:diverse_merge_keys:0.5@0.25,vision:diverse_merge:0.25@0.25,vision:diverse_merge_keys:0.25@0.25,vision:diverse_merge:0.1@0.25,vision:diverse_merge_keys:0.1@0.25]" \
  --timing_runs 50 --workers 1 --resume false --progress false --output_dir $out/policy
.venv/bin/python vla_scripts/benchmark.py --preset cpu-bench-oft --dtype float32 \
  --settings "[vision:diverse_merge:0.25@0.25,vision:diverse_merge_keys:0.25@0.25,vision:diverse_merge:0.1@0.25,vision:diverse_merge_keys:0.1@0.25]" \
  --progress false --output_dir $out/cpu-bench-oft
