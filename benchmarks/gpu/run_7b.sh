#!/usr/bin/env bash
# OpenVLA-7B and OpenVLA-OFT-7B at their real sizes (RANDOM weights: latencies are real, fidelity is not) on a CUDA
# GPU in bfloat16: the whole predict_action of every setting, interleaved with the unreduced model in the same run,
# at batch 1 and batch 8 (several robots or evaluation workers on one server), with the phase breakdown.
#   bash benchmarks/gpu/run_7b.sh OUTPUT_DIR        # needs one GPU with ~40 GB free; ~5 minutes on an H100
# (prismatic-tr-benchmark: vla_scripts/benchmark.py's console script, on PATH once the package is installed)
# Writes OUTPUT_DIR/b{1,8}/results.json (OpenVLA-7B) and OUTPUT_DIR/b{1,8}/oft/results.json (OpenVLA-OFT-7B).
set -uo pipefail
out=${1:?give the output directory}
settings="[diverse:0.25,diverse:0.1,vision:diverse:0.25@0.25,vision:diverse:0.1@0.25,vision:diverse:0.1@0.1,llm:attention:0.5@0.25]"
status=0
for batch in 1 8; do
  prismatic-tr-benchmark --preset openvla-7b --oft true --device cuda --dtype bfloat16 --batch_size "$batch" \
    --num_runs 10 --warmup 2 --settings "$settings" --policy_episodes 0 --validation_episodes 0 --adapters "[]" \
    --progress false --output_dir "$out/b$batch" || status=$?
done
exit $status
