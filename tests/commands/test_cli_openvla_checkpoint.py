"""The command-line programs on an OpenVLA checkpoint directory (OpenVLA's layout, Llama-2-sized vocabulary):
``benchmark.py --vla_path`` and ``finetune.py --vla_path`` (LoRA, reduction, a merged checkpoint that reloads
with its reduction), and a clean exit 2 when the checkpoint cannot be loaded. The checkpoint is written by
OpenVLA's own code where it runs (the pins) and natively everywhere (the same files)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("peft")
pytest.importorskip("tensorflow_datasets")

from helpers.openvla_checkpoint import sample_image, write_native_checkpoint, write_upstream_checkpoint  # noqa: E402
from helpers.rlds_fixture import DATASET, rlds_root  # noqa: E402

from prismatic_tr.models import NativeOpenVLA, build_prompt, load_vla  # noqa: E402
from prismatic_tr.vla import apply_token_reduction_from_config  # noqa: E402
from vla_scripts import benchmark  # noqa: E402
from vla_scripts.finetune import main as finetune_main  # noqa: E402

WRITERS = {"openvla_code": write_upstream_checkpoint, "native": write_native_checkpoint}


@pytest.fixture(scope="module", params=sorted(WRITERS))
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return WRITERS[request.param](tmp_path_factory.mktemp(request.param))


@pytest.fixture
def keep_threads():
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_benchmark_runs_on_the_checkpoint(checkpoint: Path, tmp_path: Path, capsys, keep_threads) -> None:
    out = tmp_path / "bench"
    records = benchmark.main(benchmark.parse_config([
        "--vla_path", str(checkpoint), "--methods", "[topk_magnitude]", "--ratios", "[0.5]", "--num_runs", "1",
        "--warmup", "0", "--dtype", "float32", "--progress", "false", "--output_dir", str(out), "--num_threads", "1",
        "--settings", "[]", "--policy_episodes", "0",
    ]))
    assert [(r["method"], r["num_patches"]) for r in records] == [("none", 256), ("topk_magnitude", 128)]
    meta = json.loads((out / "results.json").read_text())["meta"]
    assert meta["random_weights"] is False and str(checkpoint) in meta["model"]


def test_finetune_lora_with_reduction_and_reload(checkpoint: Path, tmp_path: Path, tmp_path_factory) -> None:
    root = rlds_root(tmp_path_factory.getbasetemp())
    status = finetune_main([
        "--vla_path", str(checkpoint), "--data_root_dir", str(root), "--dataset_name", DATASET,
        "--run_root_dir", str(tmp_path / "runs"), "--batch_size", "2", "--max_steps", "2", "--save_steps", "2",
        "--lora_rank", "4", "--shuffle_buffer_size", "8", "--progress_bar", "false",
        "--token_reduction.method", "topk_magnitude", "--token_reduction.keep_ratio", "0.5",
    ])
    assert status == 0
    ckpt = next((tmp_path / "runs").glob("*/checkpoints/latest"))
    vla, processor = load_vla(ckpt)
    assert isinstance(vla, NativeOpenVLA) and DATASET in vla.norm_stats and "bridge_orig" in vla.norm_stats
    assert json.loads((ckpt / "config.json").read_text())["model_type"] == "openvla"
    handle = apply_token_reduction_from_config(vla)
    assert handle is not None and handle.settings.method == "topk_magnitude" and handle.reduced_num_patches() == 128
    inputs = processor(build_prompt("pick up the red block"), Image.fromarray(sample_image()))
    with torch.no_grad():
        assert vla(**inputs).projector_features.shape[1] == 128
    assert np.isfinite(vla.predict_action(**inputs, unnorm_key=DATASET)).all()


def test_unloadable_checkpoint_exits_2_with_one_line(checkpoint: Path, tmp_path: Path, capsys, tmp_path_factory) -> None:
    broken = Path(shutil.copytree(checkpoint, tmp_path / "broken"))
    for f in broken.glob("*.safetensors*"):
        f.unlink()
    (broken / "model.safetensors").write_bytes(b"")  # present but not a safetensors file
    root = rlds_root(tmp_path_factory.getbasetemp())
    status = finetune_main(["--vla_path", str(broken), "--data_root_dir", str(root), "--dataset_name", DATASET,
                            "--run_root_dir", str(tmp_path / "runs"), "--max_steps", "1", "--batch_size", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err and err[-1].startswith("finetune.py: error:") and str(broken) in err[-1]
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(benchmark.parse_config(["--vla_path", str(broken), "--progress", "false"]))
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err
