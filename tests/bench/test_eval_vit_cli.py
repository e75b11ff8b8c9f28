"""vla_scripts/eval_vit.py: a tiny end-to-end sweep on generated images, and flag errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from prismatic_tr.bench.vit.fidelity_sweep import EvalVitConfig
from prismatic_tr.vit import tokens_per_location
from vla_scripts.eval_vit import main, parse_config


def test_sweep_writes_csv_json_png(tmp_path: Path) -> None:
    cfg = EvalVitConfig(model="vit_tiny_patch16_224", img_size=64, methods=["topk", "tome"], keep_ratios=[0.5],
                        reduction_loc=[2, 5], tome_r=[3], num_images=4, batch_size=2, output_dir=tmp_path,
                        progress=False)
    rows = main(cfg)
    assert [(r["method"], r["r"]) for r in rows] == [("none", None), ("topk", None), ("tome", None), ("tome", 3)]
    assert rows[0]["top1_agreement"] == 1.0 and rows[0]["kl_divergence"] == 0.0 and rows[0]["tokens_out"] == 17
    assert rows[1]["tokens_out"] == 1 + 4  # 16 patches -> 8 -> 4, plus CLS
    assert rows[3]["tokens_out"] == tokens_per_location(17, "tome", r=3, depth=12, num_prefix_tokens=1)[-1]
    assert all(r["gmacs"] < rows[0]["gmacs"] for r in rows[1:])
    with (tmp_path / "results.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 4
    assert rows[0]["speedup"] == 1.0 and all(r["batch_ms_p10"] <= r["batch_ms"] <= r["batch_ms_p90"] for r in rows)
    assert "seconds" not in rows[0]  # the old cold-pass wall time is gone
    meta = json.loads((tmp_path / "results.json").read_text())["meta"]
    assert meta["random_weights"] is True and meta["data"] == "generated noise"
    assert (tmp_path / "results.png").stat().st_size > 0


@pytest.mark.parametrize("args", [
    ["--keep_ratios", "[1.5]"],
    ["--methods", "[evit]"],
    ["--model", "topk_deit_small_patch16_224"],
    ["--reduction_loc", "[12]"],
    ["--num_images", "0"],
    ["--data_dir", "/nonexistent/dir"],
    ["--tome_r", "200"],
    ["--device", "tpu"],
    ["--timing_runs", "0"],
    ["--img_size", "8"],
    ["--model", "resnet18"],
    ["--keep_ratios", "0.5,1.5"],
])
def test_bad_flags_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_config(args)
    assert exc.value.code == 2 and "eval_vit.py: error:" in capsys.readouterr().err


@pytest.mark.parametrize("spelling", [["0.7", "0.5"], ["0.7,0.5"], ["[0.7, 0.5]"]])
def test_list_flags_take_every_spelling(spelling: list[str]) -> None:
    cfg = parse_config(["--keep_ratios", *spelling, "--reduction_loc", "2,5", "--methods", "topk"])
    assert cfg.keep_ratios == [0.7, 0.5] and cfg.reduction_loc == [2, 5] and cfg.methods == ["topk"]


def test_timing_is_warm_and_interleaved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every setting, the baseline included, is timed in one interleaved call after warm-up forwards, with
    its reduction attached outside the timed region."""
    from prismatic_tr.bench.measure import timing

    calls: list[dict] = []
    real = timing.interleaved
    monkeypatch.setattr(timing, "interleaved", lambda fns, **kw: calls.append({"n": len(fns), **kw}) or real(fns, **kw))
    cfg = EvalVitConfig(model="vit_tiny_patch16_224", img_size=32, methods=["topk"], keep_ratios=[0.5, 0.25],
                        reduction_loc=[2], num_images=2, batch_size=2, output_dir=tmp_path, progress=False,
                        warmup=1, timing_runs=2)
    main(cfg)
    assert len(calls) == 1 and calls[0]["n"] == 3 and calls[0]["warmup"] == 1 and calls[0]["repeats"] == 2
    assert len(calls[0]["contexts"]) == 3
