#!/usr/bin/env bash
# Issue 51's check on a lent CUDA GPU, in one go: the CUDA-graph tests (tests/vla/test_cuda_graph.py, the GPU
# half: captured == eager for every site), then eager against captured predict_action of OpenVLA-OFT-7B and
# OpenVLA-7B sizes (RANDOM weights, bfloat16) at batch 1 and 8 (benchmarks/gpu/captured.py).
#   bash benchmarks/gpu/device_check.sh OUTPUT_DIR        # ~5 minutes on an H100; run from the checkout's root
#   bash benchmarks/gpu/device_check.sh OUTPUT_DIR --settings diverse:0.25 diverse_merge:0.25 --num_runs 10
# Arguments after OUTPUT_DIR go to captured.py (its --settings, --presets, --batch_sizes, --num_runs).
# Uses the machine's own torch / transformers / timm (the package from the checkout, PYTHONPATH). Writes gpu.txt,
# pytest.txt, log.txt and <preset>_b<batch>.json into OUTPUT_DIR.
set -uo pipefail
out=${1:?give the output directory}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | tee "$out/gpu.txt"
python3 -c "import torch, transformers, timm; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'transformers', transformers.__version__, 'timm', timm.__version__)" 2>&1 | tee -a "$out/gpu.txt"
status=0
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/vla/test_cuda_graph.py 2>&1 | tee "$out/pytest.txt" \
  || status=$?
timeout 400 python3 benchmarks/gpu/captured.py --output_dir "$out" "${@:2}" 2>&1 | tee "$out/log.txt" || status=$?
exit $status
