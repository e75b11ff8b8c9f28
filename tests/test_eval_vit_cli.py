"""vla_scripts/eval_vit.py: a tiny end-to-end sweep on generated images, and flag errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from prismatic_tr.vit import tokens_per_location
from vla_scripts.eval_vit import EvalVitConfig, main, parse_config


def test_sweep_writes_csv_json_png(tmp_path: Path) -> None:
    cfg = EvalVitConfig(model="vit_tiny_patch16_224", img_size=64, methods=["topk", "tome"], keep_rates=[0.5],
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
    meta = json.loads((tmp_path / "results.json").read_text())["meta"]
    assert meta["random_weights"] is True and meta["data"] == "generated noise"
    assert (tmp_path / "results.png").stat().st_size > 0


@pytest.mark.parametrize("args", [
    ["--keep_rates", "[1.5]"],
    ["--methods", "[evit]"],
    ["--model", "topk_deit_small_patch16_224"],
    ["--reduction_loc", "[12]"],
    ["--num_images", "0"],
    ["--data_dir", "/nonexistent/dir"],
])
def test_bad_flags_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_config(args)
    assert exc.value.code == 2 and "eval_vit.py: error:" in capsys.readouterr().err
