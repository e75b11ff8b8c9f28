"""Tests of the break-even policy (profile reading, interpolation, fallback) and of the sweep outputs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from prismatic_tr.bench.vit import breakeven
from prismatic_tr.bench.vit.breakeven import (
    DEFAULT_BREAK_EVEN_TOKENS,
    DEFAULT_RULES,
    count_tokens,
    load_profile,
    predict_speedup,
    should_use_token_reduction,
    write_profile,
)
from prismatic_tr.bench.vit.sweep import SWEEP_COLUMNS, break_even_tokens, markdown_tables


def _row(size: int, batch: int, tokens: int, speedup: float, device: str = "cuda") -> dict:
    return {"model": "topk_deit_base_patch16_224", "method": "topk", "device": device, "dtype": "float32",
            "mode": "eager", "input_size": size, "batch_size": batch, "tokens": tokens, "speedup": speedup,
            "flop_ratio": 3.17, "baseline_tp": 100.0, "reduced_tp": 100.0 * speedup, "baseline_gmacs": 17.56,
            "reduced_gmacs": 5.55, "ops_added": "+8/loc: topk; syncs 0"}


# Shaped like the earlier DeiT-B study on an RTX 2080 Ti (someone else's figures, not in this repository):
# 0.9x at 224 px (197 tokens), 2.2x at 448 px (785 tokens); the batch-8 values are made up for the tests.
STUDY = [_row(224, 1, 197, 0.90), _row(448, 1, 785, 2.2), _row(224, 8, 197, 0.84), _row(448, 8, 785, 2.4)]


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    return write_profile(STUDY, tmp_path / "calib.json", device_name="test GPU")


@pytest.mark.parametrize(
    ("model", "size", "batch", "use", "speedup"),
    [
        ("deit_base_patch16_224", 224, 1, False, 0.90),
        ("deit_base_patch16_224", 448, 1, True, 2.2),
        ("topk_deit_base_patch16_224", 448, 8, True, 2.4),
        ("deit_base_patch16_224", 224, 6, False, 0.84),  # nearest calibrated batch in log2: 8
        ("deit_base_patch16_224", 640, 1, True, 2.2),  # beyond the range: clamped to the end point
    ],
)
def test_policy_reads_profile(profile: Path, model: str, size: int, batch: int, use: bool, speedup: float) -> None:
    d = should_use_token_reduction(model, size, batch, device="cuda", profile_path=profile)
    assert d.source == "profile" and d.profile_path == str(profile)
    assert d.use_reduction is use and bool(d) is use
    assert d.expected_speedup == pytest.approx(speedup)
    assert str(profile) in d.reason


def test_policy_interpolates_in_log_tokens(profile: Path) -> None:
    d = should_use_token_reduction("deit_base_patch16_224", 320, 1, device="cuda", profile_path=profile)
    assert d.tokens == 401
    assert 0.90 < d.expected_speedup < 2.2
    import math

    frac = (math.log(401) - math.log(197)) / (math.log(785) - math.log(197))
    assert d.expected_speedup == pytest.approx(0.90 + frac * (2.2 - 0.90))


def test_policy_uses_other_models_by_tokens(profile: Path) -> None:
    d = should_use_token_reduction("vit_small_patch16_224", 448, 1, device="cuda", profile_path=profile)
    assert d.source == "profile" and "other models" in d.reason and d.use_reduction


@pytest.mark.parametrize(("device", "size", "use"), [("cuda", 224, False), ("cuda", 448, True), ("cpu", 224, True)])
def test_policy_falls_back_without_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str,
                                           size: int, use: bool) -> None:
    monkeypatch.delenv(breakeven.ENV_VAR, raising=False)
    monkeypatch.setattr(breakeven, "default_profile_path", lambda dev: tmp_path / f"none_{dev}.json")
    d = should_use_token_reduction("deit_base_patch16_224", size, 1, device=device)
    assert d.source == "default" and d.expected_speedup is None
    assert "no calibration profile" in d.reason and "default" in d.reason
    assert d.use_reduction is use
    assert d.use_reduction == (d.tokens >= DEFAULT_BREAK_EVEN_TOKENS[device] == DEFAULT_RULES[device].min_tokens)
    assert d.default_basis == DEFAULT_RULES[device].basis and d.default_basis in d.reason
    assert ("NOT measured here" in d.reason) is (device == "cuda")  # a default not measured here says so


def test_default_rules_name_their_source() -> None:
    """The CPU threshold is the smallest size measured in this repository (the files exist); the CUDA one is
    labelled as an outside figure."""
    root = Path(__file__).resolve().parents[2]
    cpu, cuda = DEFAULT_RULES["cpu"], DEFAULT_RULES["cuda"]
    assert cpu.measured_here and "benchmarks/results/vit/" in cpu.basis
    sweeps = sorted((root / "benchmarks/results/vit").glob("sweep_cpu_*/sweep.csv"))
    assert sweeps, "the CPU default cites measurements that must be in the repository"
    tokens = {int(r["tokens"]) for p in sweeps for r in csv.DictReader(p.open())}
    speedups = [float(r["speedup"]) for p in sweeps for r in csv.DictReader(p.open())]
    assert min(tokens) == cpu.min_tokens and min(speedups) > 1.0  # it paid at every measured point
    assert not cuda.measured_here and "NOT measured here" in cuda.basis and "RTX 2080 Ti" in cuda.basis


def test_other_device_types_say_which_default_they_borrow(tmp_path: Path) -> None:
    d = breakeven._default(500, "mps", "no calibration profile at x")
    assert d.use_reduction and "no default for mps" in d.reason and "NOT measured here" in d.reason


def test_policy_env_var_and_device_mismatch(profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(breakeven.ENV_VAR, str(profile))
    assert should_use_token_reduction("deit_base_patch16_224", 448, 1, device="cuda").source == "profile"
    d = should_use_token_reduction("deit_base_patch16_224", 448, 1, device="cpu")
    assert d.source == "default" and "is for cuda, not cpu" in d.reason


@pytest.mark.parametrize(
    ("content", "match"), [("{not json", "not valid JSON"), (json.dumps({"format": "x", "entries": [1]}), "not a calibration")]
)
def test_bad_profile_raises(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_profile(path)
    with pytest.raises(ValueError, match=match):
        should_use_token_reduction("deit_base_patch16_224", 224, 1, device="cuda", profile_path=path)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"batch_size": 0}, "batch_size=0"), ({"input_size": 0}, "input_size=0"), ({"device": "nodev"}, "nodev"),
     ({"model_name": "resnet50_nopatch"}, "resnet50_nopatch")],
)
def test_policy_bad_arguments(kwargs: dict, match: str) -> None:
    args = {"model_name": "deit_base_patch16_224", "input_size": 224, "batch_size": 1, "device": "cpu", **kwargs}
    with pytest.raises(ValueError, match=match):
        should_use_token_reduction(**args)


@pytest.mark.parametrize(
    ("model", "size", "tokens"),
    [("deit_base_patch16_224", 224, 197), ("deit_base_patch16_224", 448, 785),
     ("vit_small_patch14_reg4_dinov2", 224, 261), ("vit_base_patch16_siglip_224", 224, 196),
     ("topk_deit_small_patch16_224", 320, 401)],
)
def test_count_tokens(model: str, size: int, tokens: int) -> None:
    assert count_tokens(model, size) == tokens


def test_predict_speedup_nearest_batch() -> None:
    entries = [{"batch_size": b, "tokens": t, "speedup": s} for b, t, s in [(1, 100, 0.5), (1, 400, 1.5), (16, 100, 3.0)]]
    assert predict_speedup(entries, 200, 2) == pytest.approx(1.0)  # batch 1 is nearest to 2; log midpoint
    assert predict_speedup(entries, 200, 8) == pytest.approx(3.0)  # batch 16 nearest to 8 (tie -> first)


def test_write_profile_round_trip(profile: Path) -> None:
    data = load_profile(profile)
    assert data["device_type"] == "cuda" and data["device_name"] == "test GPU"
    assert [(e["model"], e["tokens"]) for e in data["entries"]][:2] == [("deit_base_patch16_224", 197),
                                                                         ("deit_base_patch16_224", 785)]
    with pytest.raises(ValueError, match="at least one"):
        write_profile([], profile)


# ---------------------------------------------------------------- sweep outputs


def test_markdown_table_format() -> None:
    text = markdown_tables(STUDY)
    assert text.count("| Batch Size | Baseline TP | TR TP | Speedup | Better? |") == 2
    assert "### 224 px" in text and "### 448 px" in text
    assert "| 1 | 100.00 | 90.00 | 0.90x | no |" in text
    assert "| 8 | 100.00 | 240.00 | 2.40x | yes |" in text


@pytest.mark.parametrize(("batch", "expected"), [(1, (197 * 785) ** 0.5 * (785 / 197) ** (0.1 / 1.3 - 0.5)), (8, None)])
def test_break_even_tokens(batch: int, expected: float | None) -> None:
    rows = STUDY if batch == 1 else [_row(224, 8, 197, 1.2), _row(448, 8, 785, 2.4)]
    got = break_even_tokens(rows, batch)
    assert got == (None if expected is None else pytest.approx(expected))


def test_sweep_cli_writes_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import prismatic_tr.bench.vit.sweep as sweep_mod
    from vla_scripts import sweep as sweep_cli

    calls: list[tuple[int, int]] = []
    real = sweep_mod._time_cell
    monkeypatch.setattr(sweep_mod, "_time_cell", lambda cfg, s, b, m1, m2: calls.append((s, b)) or real(cfg, s, b, m1, m2))
    argv = ["--model", "topk_deit_tiny_patch16_224", "--keep_ratio", "0.5", "--input_sizes", "48",
            "--batch_sizes", "1", "2", "--warmup", "0", "--repeats", "1", "--out_dir", str(tmp_path), "--no_progress",
            "--profile"]
    assert sweep_cli.main(argv) == 0
    assert sorted(calls) == [(48, 1), (48, 2)]
    with (tmp_path / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == SWEEP_COLUMNS and len(rows) == 2
    assert {r["tokens"] for r in rows} == {"10"} and all(r["host_syncs"] == "0" for r in rows)
    assert all(float(r["reduced_ops"]) > float(r["baseline_ops"]) > 0 for r in rows)  # profiler columns
    assert all(float(r["baseline_wall_ms"]) > 0 and r["baseline_launches"] == "" for r in rows)  # no CUDA
    assert (tmp_path / "speedup.png").stat().st_size > 0 and "Better?" in (tmp_path / "sweep.md").read_text()
    meta = json.loads((tmp_path / "meta.json").read_text())  # the machine, dtype and command beside the timings
    assert meta["dtype"] == "float32" and meta["command"].startswith("python vla_scripts/sweep.py --model")
    assert "amx_bf16" in meta["machine"]["cpu"]["features"]
    lines = (tmp_path / "sweep.csv").read_text().splitlines()
    (tmp_path / "sweep.csv").write_text("\n".join(lines[:-1]) + "\n")  # "interrupt" before the last cell
    calls.clear()
    assert sweep_cli.main(argv) == 0
    assert calls == [(48, 2)]
    assert len((tmp_path / "sweep.csv").read_text().splitlines()) == 3


def test_calibrate_cli_profile_is_used(tmp_path: Path) -> None:
    from vla_scripts import calibrate

    out = tmp_path / "cpu.json"
    argv = ["--model", "topk_deit_tiny_patch16_224", "--keep_ratio", "0.5", "--input_sizes", "32",
            "--batch_sizes", "1", "--warmup", "0", "--repeats", "1", "--device", "cpu", "--out", str(out), "--no_progress"]
    assert calibrate.main(argv) == 0
    d = should_use_token_reduction("deit_tiny_patch16_224", 32, 1, device="cpu", profile_path=out)
    assert d.source == "profile" and d.expected_speedup == pytest.approx(load_profile(out)["entries"][0]["speedup"])
    profile = json.loads(out.read_text())
    assert profile["command"].startswith("python vla_scripts/calibrate.py") and profile["dtype"] == "float32"
    assert "avx2" in profile["machine"]["cpu"]["features"]


@pytest.mark.parametrize("argv", [["--input_sizes", "0"], ["--model", "deit_tiny_patch16_224"], ["--repeats", "0"]])
def test_sweep_cli_bad_flags(argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from vla_scripts import sweep as sweep_cli

    with pytest.raises(SystemExit) as exc:
        sweep_cli.main(argv + ["--out_dir", str(tmp_path)])
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err
