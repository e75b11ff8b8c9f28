"""vla_scripts/benchmark.py: an end-to-end run with the tiny preset writes the table and all three files;
bad flags exit with status 2 and a message naming the bad value, before any model is built."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from prismatic_tr.bench.vla import config, job
from prismatic_tr.bench.vla.policy_rows import policy_success_applies
from prismatic_tr.cli import EXIT_NOISY
from prismatic_tr.reducers import available_methods
from prismatic_tr.vla.settings import DEFAULT_METHODS
from vla_scripts import benchmark  # the command, run in-process


def applies(cfg: config.BenchmarkConfig) -> str | None:
    return policy_success_applies(cfg.vla_path, cfg.policy_episodes)


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
        "--settings", "vision:attention:0.5@0.5", "llm:attention:0.25@0.5", "--policy_episodes", "0",
        "--oft", "true",  # then the same settings on tiny-oft, into <output_dir>/oft
    ]))
    stdout = capsys.readouterr().out
    assert "RANDOM" in stdout and "end to end" in stdout and "phase sum" in stdout and "wrote" in stdout
    assert {p.name for p in out.iterdir()} >= {"results.csv", "results.json", "results.png"}
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(r["method"], r["num_patches"], r["llm_visual_tokens"]) for r in rows] == [
        ("none", "256", "256"), ("topk_magnitude", "128", "128"), ("spatial_pool", "64", "64"),
        ("vision:attention@0.5", "128", "128"), ("llm:attention@0.5", "256", "64")]
    assert all(float(r["predict_action_ms"]) > 0 and float(r["predict_action_speedup"]) > 0 for r in rows)
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["random_weights"] is True and data["meta"]["dtype"] == "float32"
    assert data["meta"]["dtype_reason"] == "--dtype float32: given"
    assert set(data["meta"]["machine"]["cpu"]["features"]) == {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    assert all(r["dtype_reason"] == "--dtype float32: given" for r in data["records"])
    assert data["meta"]["config"]["preset"] == "tiny" and data["meta"]["machine"]["torch_threads"] == 1
    assert len(data["meta"]["machine"]["load_average_at_start"]) == 3  # os.getloadavg() on Linux
    assert all(isinstance(r["noise_flag"], bool) for r in data["records"])
    assert [r["speedup"] for r in data["records"]] == [pytest.approx(float(r["speedup"])) for r in rows]
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    oft = json.loads((out / "oft" / "results.json").read_text())
    assert oft["meta"]["config"]["preset"] == "tiny-oft" and "OpenVLA-OFT (tiny-oft" in stdout
    assert [(r["model_kind"], r["num_patches"], r["llm_visual_tokens"]) for r in oft["records"]] == [
        ("openvla-oft", 512, 512), ("openvla-oft", 256, 256), ("openvla-oft", 128, 128), ("openvla-oft", 256, 256),
        ("openvla-oft", 512, 128)]


@pytest.mark.slow
def test_script_runs_as_a_program():
    """``python vla_scripts/benchmark.py`` resolves its imports (bad flag: exits before building a model)."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(root / "vla_scripts" / "benchmark.py"), "--ratios", "[2.0]"],
                          capture_output=True, text=True, timeout=300, env=env)  # this checkout's code
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
    (["--spatial_merge_size", "3"], "does not divide the 16x16 patch grid of dinosiglip-vit-so-224px; allowed: 1, 2, 4"),
    (["--num_threads", "-1"], "num_threads"),
    (["--unnorm_key", "libero_spatial"], "libero_spatial"),
    (["--instruction", " "], "--instruction"),
    (["--methods", "topk_magnitude,bogus"], "bogus"),
    (["--ratios", "0.5", "1.5"], "1.5"),
    (["--validation_episodes", "-1"], "--validation_episodes -1"),
    (["--adapters", "no-such-adapter"], "'no-such-adapter' is not a shipped adapter"),
    (["--adapters", "projector-diverse-0.1,projector-diverse-0.1"], "names an adapter twice"),
]


@pytest.mark.parametrize("flags, needle", BAD_FLAGS)
def test_bad_flags_exit_2_with_message(flags, needle, capsys, monkeypatch):
    monkeypatch.setattr(job, "load_model", lambda *a: pytest.fail("a model was built for bad flags"))
    with pytest.raises(SystemExit) as exc:
        benchmark.main(benchmark.parse_config(flags))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and needle in err


@pytest.mark.parametrize("flags", [
    ["--methods", "topk_magnitude", "random", "--ratios", "0.75", "0.5"],
    ["--methods", "topk_magnitude,random", "--ratios", "0.75,0.5"],
    ["--methods=topk_magnitude,random", "--ratios=0.75,0.5"],
    ["--methods", "[topk_magnitude, random]", "--ratios", "[0.75,0.5]"],
])
def test_list_flags_take_every_spelling(flags):
    cfg = benchmark.parse_config([*flags, "--num_runs", "3"])
    assert cfg.methods == ["topk_magnitude", "random"] and cfg.ratios == [0.75, 0.5] and cfg.num_runs == 3


def _checkpoint_dir(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize(("config", "flags", "needle"), [
    ({"timm_model_ids": ["vit_so400m_patch14_siglip_224"], "image_sizes": [224]}, ["--spatial_merge_size", "3"],
     "16x16 patch grid of the checkpoint"),
    ({"timm_model_ids": ["vit_x_patch16_384"], "image_sizes": [384]}, ["--spatial_merge_size", "5"],
     "24x24 patch grid"),
    ({"norm_stats": {"bridge_orig": {}}}, ["--unnorm_key", "fractal"], "allowed: ['bridge_orig']"),
    (None, [], "has no config.json"),
    ({}, ["--preset", "tiny"], "pass one of them"),
])
def test_checkpoint_flags_are_checked_against_its_config(tmp_path, capsys, monkeypatch, config, flags, needle):
    monkeypatch.setattr(job, "load_model", lambda *a: pytest.fail("a model was built for bad flags"))
    path = _checkpoint_dir(tmp_path, config) if config is not None else tmp_path
    with pytest.raises(SystemExit) as exc:
        benchmark.parse_config(["--vla_path", str(path), *flags])
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_checkpoint_grid_that_fits_passes(tmp_path):
    path = _checkpoint_dir(tmp_path, {"timm_model_ids": ["vit_x_patch14_224"], "image_sizes": [224]})
    assert benchmark.parse_config(["--vla_path", str(path), "--spatial_merge_size", "4"]).spatial_merge_size == 4


def test_help_has_a_description(capsys):
    with pytest.raises(SystemExit) as exc:
        benchmark.parse_config(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "Benchmark one OpenVLA control step" in out and "--strict" in out


def test_noisy_run_is_flagged_and_strict_exits_3(tmp_path, capsys, monkeypatch, keep_threads):
    """An injected slow vision phase in the baseline row: warnings, noise_flag in the files, exit 3."""
    from helpers.slow_step import slow_baseline_step

    from prismatic_tr.bench.vla import benchmark as vla_benchmark

    monkeypatch.setattr(vla_benchmark, "PolicyStep", slow_baseline_step(0.25))
    out = tmp_path / "bench"
    with pytest.raises(SystemExit) as exc:
        benchmark.main(benchmark.parse_config([
            "--preset", "tiny", "--methods", "topk_magnitude", "--ratios", "0.5", "--num_runs", "2", "--warmup", "0",
            "--dtype", "float32", "--progress", "false", "--output_dir", str(out), "--num_threads", "1", "--strict",
            "true", "--settings", "[]", "--policy_episodes", "0"]))
    assert exc.value.code == EXIT_NOISY == 3
    captured = capsys.readouterr()
    assert "WARNING: noisy row none" in captured.out and "What to do" in captured.out
    assert "--strict" in captured.err
    data = json.loads((out / "results.json").read_text())
    assert [r["noise_flag"] for r in data["records"]] == [True, True] and data["meta"]["noisy_rows"] == 2
    load = data["meta"]["machine"]["load_average_at_start"]
    assert load is None or (len(load) == 3 and all(x >= 0 for x in load))
    assert "noise_flag" in data["meta"]["conventions"]


def test_defaults_are_the_documented_main_job_and_full_sweep():
    cfg = benchmark.parse_config([])
    assert cfg.preset is None and cfg.dtype == "auto" and cfg.ratios == [0.5, 0.25, 0.1] and cfg.methods == []
    assert cfg.spatial_merge_size == 2 and cfg.output_dir == Path("outputs/benchmark")
    assert cfg.settings == config.MAIN_SETTINGS and cfg.policy_episodes == 50 and cfg.policy_split == "test"
    assert (cfg.num_runs, cfg.warmup) == (3, 0)  # each setting's MACs pass warms it
    assert cfg.validation_episodes == 20
    assert cfg.adapters == ["vision-diverse_merge-0.1-0.25", "projector-diverse_merge-0.1"]
    assert cfg.adapters == config.SHIPPED_ADAPTERS
    # every shipped adapter's setting is timed by the main job, so its row has a speed to copy
    from prismatic_tr.bench.vla.policy_rows import adapter_setting

    assert {adapter_setting(a).label for a in cfg.adapters} <= set(cfg.settings)
    assert benchmark.parse_config(["--adapters", "[]"]).adapters == []
    full = benchmark.parse_config(["--full", "true"])
    assert full.methods == config.FULL_METHODS and full.methods[0] == DEFAULT_METHODS["projector"]
    assert set(full.methods) == set(available_methods()), "--full runs every registered projector method"
    assert full.policy_episodes == 100 and (full.num_runs, full.warmup) == (10, 2)
    assert set(config.FULL_SITE_SETTINGS) < set(full.settings)
    assert "random:0.1:compact" in full.settings and "vision:diverse:0.25@0.25:compact" in full.settings
    assert not any(s.startswith("llm:") and s.endswith(":compact") for s in full.settings)
    # a flag given overrides the profile's value
    assert benchmark.parse_config(["--full", "true", "--policy_episodes", "7"]).policy_episodes == 7
    assert benchmark.parse_config(["--settings", "random:0.5"]).settings == ["random:0.5"]


def test_the_main_job_also_times_openvla_oft_with_its_settings():
    cfg = benchmark.parse_config([])
    assert cfg.oft_rows()
    oft = cfg.for_oft()
    assert (oft.preset, oft.output_dir, oft.settings, oft.num_runs) == ("cpu-bench-oft", cfg.output_dir / "oft",
                                                                        config.OFT_MAIN_SETTINGS, cfg.num_runs)
    assert set(config.OFT_MAIN_SETTINGS) < set(config.MAIN_SETTINGS)
    assert (oft.policy_episodes, oft.validation_episodes, oft.adapters, oft.oft_rows()) == (0, 0, [], False)
    for flags in (["--full", "true"], ["--preset", "tiny"], ["--oft", "false"], ["--settings", "[random:0.5]"],
                  ["--methods", "[random]"]):
        assert not benchmark.parse_config(flags).oft_rows(), flags  # a job of the user's own settings: asked for
    custom = benchmark.parse_config(["--settings", "[random:0.5]", "--oft", "true"])
    assert custom.oft_rows() and custom.for_oft().settings == ["random:0.5"]
    assert benchmark.parse_config(["--preset", "tiny", "--oft", "true"]).for_oft().preset == "tiny-oft"
    assert benchmark.parse_config(["--preset", "openvla-7b", "--oft", "true"]).for_oft().preset == "openvla-oft-7b"


@pytest.mark.parametrize("flags", [["--preset", "tiny-oft", "--oft", "true"], ["--preset", "policy", "--oft", "true"]])
def test_oft_rows_need_a_preset_with_an_oft_twin(flags, capsys):
    with pytest.raises(SystemExit) as exc:
        benchmark.parse_config(flags)
    assert exc.value.code == 2 and "--oft true needs" in capsys.readouterr().err


def test_bad_split_and_pool_specs_exit_2(capsys):
    for flags, needle in ((["--policy_split", "train"], "--policy_split 'train'"),
                          (["--settings", "spatial_pool:3x3"], "spatial_merge_size 3 does not divide")):
        with pytest.raises(SystemExit) as exc:
            benchmark.parse_config(flags)
        assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_vla_path_rows_get_the_bundled_policys_success_only_when_it_is_that_policy(tmp_path):
    from prismatic_tr.policy.bundled import BUNDLED_POLICY_DIR

    other = _checkpoint_dir(tmp_path, {"timm_model_ids": ["vit_so400m_patch14_siglip_224"], "image_sizes": [224]})
    reason = applies(benchmark.parse_config(["--vla_path", str(other)]))
    assert reason is not None and "not the bundled policy" in reason
    assert applies(benchmark.parse_config(["--vla_path", str(BUNDLED_POLICY_DIR)])) is None
    assert applies(benchmark.parse_config([])) is None
    assert "--policy_episodes 0" in applies(benchmark.parse_config(["--policy_episodes", "0"]))


def test_one_progress_bar_weighs_every_kind_of_work():
    from prismatic_tr.bench.measure.progress import JobProgress

    bar = JobProgress({"round": (4, 2.5), "episode": (10, 0.5)}, enabled=False)
    assert bar.total == 15.0
    for kind in ["round"] * 4 + ["episode"] * 10:
        bar.step(kind, "ignored")
    assert bar.done == pytest.approx(15.0)
    with pytest.raises(ValueError, match="count >= 0 and seconds > 0"):
        JobProgress({"round": (1, 0.0)}, enabled=False)
    assert job.count_settings(benchmark.parse_config([])) == 1 + len(config.MAIN_SETTINGS)
