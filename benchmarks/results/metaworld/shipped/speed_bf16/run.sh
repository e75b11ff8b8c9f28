#!/bin/bash
# issue 48: what the MetaWorld table's merging settings cost end to end at real tower sizes in bfloat16 (OpenVLA-OFT's
# inference dtype), on a CPU that multiplies bf16 in hardware (AMX-BF16 or AVX512-BF16): the cpu-bench-oft preset
# (DINOv2-L + SigLIP-so400m towers, an 8-layer Llama 2048 wide, two images, proprio, one pass; random weights), the
# whole predict_action at batch 1, every setting interleaved with unreduced, 10 rounds. Run on a quiet machine.
cd "$(dirname "$0")/../../../../.."
exec ${PYTHON:-.venv/bin/python} vla_scripts/benchmark.py --preset cpu-bench-oft --dtype bfloat16 --num_runs 10 \
  --settings "[diverse:0.25,diverse_merge:0.5,diverse_merge:0.25,diverse_merge:0.1,vision:diverse:0.25@0.25,vision:diverse_merge:0.5@0.25,vision:diverse_merge_keys:0.5@0.25,vision:diverse_merge:0.25@0.25,vision:diverse_merge_keys:0.25@0.25,vision:diverse_merge:0.1@0.25,vision:diverse_merge_keys:0.1@0.25]" \
  --progress false --output_dir benchmarks/results/metaworld/shipped/speed_bf16
