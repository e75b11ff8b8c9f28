"""vla_scripts/benchmark.py: an end-to-end run with the tiny preset writes the table and all three files;
bad flags exit with status 2 and a message naming the bad value, before any model is built."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vla_scripts import benchmark


@pytest.fixture
def keep_threads():
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_tiny_run_writes_table_csv_json_and_png(tmp_path, capsys, keep_threads):
    """The whole program in-process (the test session has already paid for the imports)."""
    out = tmp_path / "bench"
    benchmark.main(benchmark.parse_config([
        "--preset", "tiny", "--methods", "[topk_magnitude,spatial_pool]", "--ratios", "[0.5]", "--num_runs", "2",
        "--warmup", "0", "--dtype", "float32", "--progress", "false", "--output_dir", str(out),
        "--num_threads", "1",  # a tiny model gains nothing from threads
    ]))
    stdout = capsys.readouterr().out
    assert "RANDOM" in stdout and "speedup" in stdout and "wrote" in stdout
    assert {p.name for p in out.iterdir()} >= {"results.csv", "results.json", "results.png"}
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(r["method"], r["num_patches"]) for r in rows] == [
        ("none", "256"), ("topk_magnitude", "128"), ("spatial_pool", "64")]
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["random_weights"] is True and data["meta"]["dtype"] == "float32"
    assert data["meta"]["config"]["preset"] == "tiny" and data["meta"]["machine"]["torch_threads"] == 1
    assert [r["speedup"] for r in data["records"]] == [pytest.approx(float(r["speedup"])) for r in rows]
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_script_runs_as_a_program():
    """``python vla_scripts/benchmark.py`` resolves its imports (bad flag: exits before building a model)."""
    script = Path(__file__).resolve().parents[1] / "vla_scripts" / "benchmark.py"
    proc = subprocess.run([sys.executable, str(script), "--ratios", "[2.0]"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "2.0" in proc.stderr and "(0, 1]" in proc.stderr


# (flags, text the error message must contain)
BAD_FLAGS = [
    (["--methods", "[topk_magnitude,bogus]"], "bogus"),
    (["--ratios", "[0.5,1.5]"], "1.5"),
    (["--ratios", "[0.0]"], "0.0"),
    (["--vla_path", "/nonexistent/checkpoint"], "/nonexistent/checkpoint"),
    (["--preset", "huge"], "huge"),
    (["--vision_backbone_id", "resnet"], "resnet"),
    (["--dtype", "fp8"], "fp8"),
    (["--device", "tpu"], "tpu"),
    (["--num_runs", "0"], "num_runs"),
    (["--batch_size", "0"], "batch_size"),
    (["--spatial_merge_size", "0"], "spatial_merge_size"),
    (["--num_threads", "-1"], "num_threads"),
]


@pytest.mark.parametrize("flags, needle", BAD_FLAGS)
def test_bad_flags_exit_2_with_message(flags, needle, capsys, monkeypatch):
    monkeypatch.setattr(benchmark, "load_model", lambda *a: pytest.fail("a model was built for bad flags"))
    with pytest.raises(SystemExit) as exc:
        benchmark.main(benchmark.parse_config(flags))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and needle in err


def test_defaults_are_the_documented_sweep():
    cfg = benchmark.parse_config([])
    assert cfg.preset is None and cfg.dtype == "auto" and cfg.ratios == [0.75, 0.5, 0.25]
    assert cfg.methods == ["topk_magnitude", "attention_score", "random", "spatial_pool"]
    assert cfg.spatial_merge_size == 2 and cfg.output_dir == Path("outputs/benchmark")
