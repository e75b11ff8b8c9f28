"""Two-process DDP fine-tuning with torchrun (gloo on the CPU; needs the loopback interface)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("tensorflow_datasets")

from helpers.rlds_fixture import DATASET, rlds_root, tiny_vla_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_torchrun_two_processes(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path):
    base = tmp_path_factory.getbasetemp()
    root, vla_dir = rlds_root(base), tiny_vla_dir(base)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(REPO / "vla_scripts" / "finetune.py"),
        "--vla_path", str(vla_dir), "--data_root_dir", str(root), "--dataset_name", DATASET,
        "--run_root_dir", str(tmp_path / "runs"), "--batch_size", "2", "--max_steps", "2", "--save_steps", "2",
        "--grad_accumulation_steps", "2",
        "--lora_rank", "4", "--shuffle_buffer_size", "8", "--log_every", "1", "--progress_bar", "false",
        "--token_reduction.method", "topk_magnitude", "--token_reduction.keep_ratio", "0.5",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}  # this checkout's code
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    print(f"torchrun 2 processes: {time.perf_counter() - start:.1f} s")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    ckpts = sorted(p.name for p in (runs[0] / "checkpoints").iterdir())
    assert ckpts == ["latest"], ckpts  # written once, by rank 0, no temporary directory left behind
    config = json.loads((runs[0] / "checkpoints" / "latest" / "config.json").read_text())
    assert config["token_reduction"]["method"] == "topk_magnitude" and DATASET in config["norm_stats"]
    assert out.count("prismatic_tr.training: step 2 ") == 1  # only rank 0 logs
