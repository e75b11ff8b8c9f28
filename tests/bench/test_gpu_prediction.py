"""The OpenVLA-OFT-7B H100 prediction (``prismatic_tr.bench.vla.gpu_prediction``, ``benchmarks/oft_gpu_prediction.py``):
its arithmetic by hand, its rows from a results file, and the script on the committed bfloat16 run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prismatic_tr.bench.vla import gpu_prediction as gp

ROOT = Path(__file__).resolve().parents[2]


def test_the_pass_is_the_slower_of_compute_and_the_weight_read():
    size = gp.LlamaSize()
    assert size.matmul_params == 32 * (4 * 4096**2 + 3 * 4096 * 11008)  # Llama-2-7B's layers: 6.48e9
    read_ms = size.weight_bytes / (gp.H100_HBM_TBPS * 1e12 * gp.BANDWIDTH_EFFICIENCY) * 1e3
    assert gp.llm_pass_ms(1) == pytest.approx(read_ms)  # one position: bound by reading the weights
    long = 2000
    flops = long * (2 * size.matmul_params + 4 * 32 * 4096 * long)
    assert gp.llm_pass_ms(long) == pytest.approx(flops / (gp.H100_BF16_DENSE_TFLOPS * 1e12 * gp.MATMUL_EFFICIENCY) * 1e3)


def record(setting: str, vision_ms: float, seq_len: int, visual: int, kept: int, depth: float | None = None) -> dict:
    return {"setting": setting, "vision_ms": vision_ms, "seq_len": seq_len, "num_patches": visual,
            "llm_visual_tokens": kept, "depth_fraction": depth, "predict_action_speedup": 1.5}


def test_rows_scale_the_towers_by_the_cpu_ratio_and_shorten_the_pass():
    base = record("none", 800.0, 590, 512, 512)
    rows = gp.predict_run({"records": [base, record("vision", 400.0, 130, 52, 52),
                                       record("llm", 800.0, 590, 512, 256, depth=0.25)]})
    assert [r["setting"] for r in rows] == ["none", "vision", "llm"] and rows[0]["predicted_speedup"] == 1.0
    assert rows[1]["towers_ms"] == pytest.approx(gp.TOWERS_MS_PER_IMAGE)  # half the CPU tower time, 2 images
    assert rows[2]["positions"] == pytest.approx(0.25 * 590 + 0.75 * (590 - 256))
    assert rows[1]["predicted_speedup"] > rows[2]["predicted_speedup"] > 1.0
    with pytest.raises(ValueError, match="unreduced baseline"):
        gp.predict_run({"records": [record("vision", 1.0, 1, 1, 1)]})


def test_the_script_labels_its_output_a_prediction():
    out = subprocess.run([sys.executable, "benchmarks/oft_gpu_prediction.py"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    data = json.loads(out.stdout)
    assert data["what"].startswith("PREDICTION") and data["rows"][0]["setting"] == "none"
    bad = subprocess.run([sys.executable, "benchmarks/oft_gpu_prediction.py", "--results", "nowhere.json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nowhere.json" in bad.stderr
