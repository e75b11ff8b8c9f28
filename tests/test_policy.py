"""The policy layer: the training recipe on a few demonstrations, closed-loop and offline evaluation of reduction
settings through their command-line programs, Wilson intervals, batched episodes equal to single ones."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("tensorflow_datasets")

from prismatic_tr.bench.vla.specs import Setting, parse_setting  # noqa: E402
from prismatic_tr.eval import wilson_interval  # noqa: E402
from prismatic_tr.models import load_vla  # noqa: E402
from prismatic_tr.policy.closed_loop import SuccessSummary, run_episodes  # noqa: E402
from prismatic_tr.policy.train import DATASET, PolicyTrainConfig, run_recipe  # noqa: E402
from vla_scripts import eval_offline, eval_policy, train_policy  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The recipe end to end at toy size: 6 demonstrations, 3 optimizer steps, 2 evaluation episodes."""
    out = tmp_path_factory.mktemp("policy")
    cfg = PolicyTrainConfig(output_dir=out, num_episodes=6, max_steps=3, batch_size=4, lr_warmup_steps=1,
                            eval_episodes=2, eval_batch_size=2, preset="tiny", install_dir=out / "installed",
                            vision_pretrain_steps=2, freeze_vision=True, grounding_loss_weight=1.0, progress=False)
    return {"out": out, "record": run_recipe(cfg)}


def test_recipe_writes_checkpoint_curve_and_evaluation(trained: dict) -> None:
    out, record = trained["out"], trained["record"]
    rows = list(csv.DictReader((out / "training_curve.csv").open()))
    assert [int(float(r["step"])) for r in rows] == [1, 2, 3] and all(math.isfinite(float(r["loss"])) for r in rows)
    assert all(float(r["aux_loss"]) >= 0.0 for r in rows)  # the grounding loss ran
    assert float(rows[0]["lr"]) == pytest.approx(5e-4 * 1.0) or float(rows[0]["lr"]) > 0
    pre = list(csv.DictReader((out / "vision_pretrain_curve.csv").open()))
    assert [int(float(r["step"])) for r in pre] == [2] and math.isfinite(float(pre[0]["offset_error_cm"]))
    ev = record["evaluation"]
    assert ev["episodes"] == 2 and 0.0 <= ev["success_ci_low"] <= ev["success_rate"] <= ev["success_ci_high"] <= 1
    installed = out / "installed"
    assert {"config.json", "model.safetensors", "evaluation.json", "training_curve.csv", "demos.json"} <= {
        p.name for p in installed.iterdir()}
    vla, _ = load_vla(installed)
    assert DATASET in vla.norm_stats and "bridge_orig" not in vla.norm_stats
    init, _ = load_vla(out / "init")  # --freeze_vision: the towers are the pretrained ones, the rest trained
    towers = dict(init.vision_backbone.named_parameters())
    assert all(torch.equal(p, towers[n]) for n, p in vla.vision_backbone.named_parameters())
    assert not torch.equal(vla.projector.state_dict()["fc1.weight"], init.projector.state_dict()["fc1.weight"])


def test_recipe_continues_a_checkpoint_on_written_demonstrations(trained: dict, tmp_path: Path) -> None:
    start = Path(trained["record"]["checkpoint"])
    cfg = PolicyTrainConfig(output_dir=tmp_path, data_root=trained["out"] / "data", init_checkpoint=start,
                            max_steps=1, batch_size=4, lr_warmup_steps=1, eval_episodes=1, eval_batch_size=1,
                            progress=False)
    record = run_recipe(cfg)
    assert not (tmp_path / "data").exists() and not (tmp_path / "init").exists()  # neither written again
    assert Path(record["checkpoint"]).parent.parent.name.startswith(start.name + "+")
    assert record["evaluation"]["episodes"] == 1


def test_eval_policy_cli(trained: dict, tmp_path: Path) -> None:
    ckpt = trained["record"]["checkpoint"]
    out = tmp_path / "eval"
    records = eval_policy.main(eval_policy.parse_config([
        "--vla_path", ckpt, "--episodes", "2", "--batch_size", "2", "--methods", "topk_magnitude", "spatial_pool",
        "--ratios", "0.5", "--settings", "vision:attention:0.25@0.5", "llm:attention:0.5@0.5",
        "--timing_runs", "1", "--progress", "false", "--output_dir", str(out), "--num_threads", "1",
    ]))
    assert [r["setting"] for r in records] == ["none", "topk_magnitude:0.5", "spatial_pool:2x2",
                                               "vision:attention:0.25@0.5", "llm:attention:0.5@0.5"]
    assert [r["method"] for r in records] == ["none", "topk_magnitude", "spatial_pool", "vision:attention@0.5",
                                              "llm:attention@0.5"]
    assert [r["num_patches"] for r in records] == [256, 128, 64, 64, 256]
    assert records[-1]["llm_visual_tokens"] == 128
    for r in records:
        assert r["episodes"] == 2 and r["success_ci_low"] <= r["success_rate"] <= r["success_ci_high"]
        assert r["predict_action_ms"] > 0 and r["mean_steps"] >= 1
    rows = list(csv.DictReader((out / "results.csv").open()))
    need = {"method", "reduction_ratio", "num_patches", "success_rate", "success_ci_low", "success_ci_high",
            "episodes", "mean_steps", "predict_action_ms"}
    assert need <= set(rows[0]) and (out / "results.png").stat().st_size > 0
    assert json.loads((out / "results.json").read_text())["meta"]["model"] == ckpt


def test_eval_offline_cli(trained: dict, tmp_path: Path) -> None:
    out = tmp_path / "offline"
    records = eval_offline.main(eval_offline.parse_config([
        "--vla_path", trained["record"]["checkpoint"], "--data_root_dir", str(trained["out"] / "data"),
        "--dataset_name", DATASET, "--max_samples", "5", "--batch_size", "3", "--methods", "random",
        "--ratios", "0.25", "--settings", "llm:attention:0.25@0.5", "--progress", "false", "--output_dir", str(out),
        "--num_threads", "1",
    ]))
    assert [r["setting"] for r in records] == ["none", "random:0.25", "llm:attention:0.25@0.5"]
    base = records[0]
    assert base["action_l1_to_unreduced"] == 0.0 and base["token_agreement"] == 1.0 and base["samples"] == 5
    assert all(r["action_l1_to_demo"] >= 0 and 0 <= r["token_agreement"] <= 1 for r in records)
    assert {"method", "reduction_ratio", "num_patches", "action_l1_to_demo", "action_l1_to_unreduced",
            "token_agreement"} <= set(next(csv.DictReader((out / "results.csv").open())))


@pytest.mark.parametrize("argv, match", [
    (["--episodes", "0"], "--episodes 0"),
    (["--settings", "vision:topk_magnitude:0.5@0.3"], "not allowed at site 'vision'"),
    (["--ratios", "1.5"], "1.5"),
    (["--vla_path", "/nonexistent"], "not a checkpoint directory"),
])
def test_eval_policy_bad_flags_exit_2(argv: list[str], match: str, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        eval_policy.parse_config(argv)
    assert err.value.code == 2 and match in capsys.readouterr().err


@pytest.mark.parametrize("argv, match", [
    (["--demo_min_objects", "0"], "--demo_min_objects 0"),
    (["--demo_min_objects", "4", "--demo_max_objects", "3"], "need 1 <= min <= max <= 5"),
    (["--save_steps", "0"], "--save_steps 0"),
    (["--vision_pretrain_steps", "-1"], "--vision_pretrain_steps -1"),
    (["--grounding_loss_weight", "-1"], "--grounding_loss_weight -1"),
    (["--init_checkpoint", "/nonexistent"], "is not a checkpoint directory"),
    (["--data_root", "/nonexistent"], "holds no tabletop_pick demonstrations"),
    (["--preset", "huge"], "--preset 'huge'"),
])
def test_train_policy_bad_flags_exit_2(argv: list[str], match: str, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        train_policy.parse_config(argv)
    assert err.value.code == 2 and match in capsys.readouterr().err


def test_eval_offline_bad_inputs_exit_2(trained: dict, tmp_path: Path, capsys) -> None:
    ckpt = trained["record"]["checkpoint"]
    data = str(trained["out"] / "data")
    with pytest.raises(SystemExit) as err:
        eval_offline.parse_config(["--data_root_dir", data, "--dataset_name", "no_such_set", "--vla_path", ckpt])
    assert err.value.code == 2 and "no_such_set" in capsys.readouterr().err
    cfg = eval_offline.parse_config(["--data_root_dir", data, "--dataset_name", DATASET, "--vla_path", ckpt,
                                     "--unnorm_key", "bridge_orig", "--output_dir", str(tmp_path)])
    with pytest.raises(SystemExit) as err:
        eval_offline.main(cfg)
    message = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(message) == 1 and "no action statistics for 'bridge_orig'" in message[0]
    cfg = eval_offline.parse_config(["--data_root_dir", data, "--dataset_name", DATASET, "--vla_path", ckpt,
                                     "--split", "test", "--output_dir", str(tmp_path)])
    with pytest.raises(SystemExit) as err:
        eval_offline.main(cfg)
    assert err.value.code == 2 and "split 'test'" in capsys.readouterr().err


def test_benchmark_merges_policy_success_and_plots_the_tradeoff(trained: dict, tmp_path: Path, monkeypatch,
                                                                capsys) -> None:
    """The main job's fidelity columns come from the bundled policy (here: the recipe's toy checkpoint)."""
    from prismatic_tr.policy import bundled
    from vla_scripts import benchmark

    monkeypatch.setattr(bundled, "BUNDLED_POLICY_DIR", trained["out"] / "installed")
    saved = torch.get_num_threads()
    out = tmp_path / "bench"
    try:
        records = benchmark.main(benchmark.parse_config([
            "--preset", "tiny", "--methods", "topk_magnitude", "--ratios", "0.5", "--num_runs", "1", "--warmup", "0",
            "--dtype", "float32", "--progress", "false", "--output_dir", str(out), "--num_threads", "1",
            "--settings", "vision:attention:0.5@0.5", "--policy_episodes", "2"]))
    finally:
        torch.set_num_threads(saved)
    assert [r["setting"] for r in records] == ["none", "topk_magnitude:0.5", "vision:attention:0.5@0.5"]
    for r in records:
        assert r["policy_episodes"] == 2 and r["success_ci_low"] <= r["success_rate"] <= r["success_ci_high"]
        assert r["policy_action_l1_to_demo"] >= 0 and 0 <= r["policy_token_agreement"] <= 1
    assert records[0]["policy_token_agreement"] == 1.0 and records[0]["policy_action_l1_to_unreduced"] == 0.0
    meta = json.loads((out / "results.json").read_text())["meta"]
    assert meta["policy_fidelity"].startswith("bundled tabletop policy")
    assert set(meta["best_within_2pp"]) <= {"projector", "vision"}
    assert (out / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "success" in capsys.readouterr().out


def test_best_within_picks_the_fastest_setting_per_site_at_equal_success() -> None:
    from prismatic_tr.policy.report import best_within

    def rec(setting: str, site: str, success: float, speedup: float) -> dict:
        return {"setting": setting, "site": site, "success_rate": success, "predict_action_speedup": speedup}

    records = [rec("none", "none", 0.90, 1.0), rec("a", "projector", 0.89, 1.2), rec("b", "projector", 0.87, 1.4),
               rec("c", "projector", 0.88, 1.3), rec("d", "vision", 0.95, 1.5), rec("e", "vision", 0.5, 2.5),
               rec("f", "llm", 0.70, 1.1)]
    best = best_within(records)
    assert {site: r["setting"] for site, r in best.items()} == {"projector": "c", "vision": "d"}
    assert best_within(records, max_loss=0.5)["vision"]["setting"] == "e"
    assert best_within(records[1:]) == {}


def test_bundled_policy_missing_is_a_clear_note(tmp_path: Path, monkeypatch) -> None:
    from prismatic_tr.policy import bundled
    from vla_scripts import benchmark

    monkeypatch.setattr(bundled, "BUNDLED_POLICY_DIR", tmp_path / "nowhere")
    with pytest.raises(ValueError, match="train_policy.py --install_dir"):
        bundled.bundled_policy_dir()
    cfg = benchmark.parse_config(["--preset", "tiny", "--policy_episodes", "1"])
    records = [{"setting": "none"}]
    assert benchmark.add_policy_fidelity(records, cfg).startswith("not measured: the bundled policy is missing")
    assert records == [{"setting": "none"}]


def test_batched_episodes_equal_single_episodes(trained: dict) -> None:
    vla, processor = load_vla(trained["record"]["checkpoint"])
    seeds = [11, 12, 13]
    batched = run_episodes(vla, processor, seeds, DATASET, batch_size=3)
    single = [run_episodes(vla, processor, [s], DATASET, batch_size=1)[0] for s in seeds]
    assert batched == single


@pytest.mark.parametrize("k, n, low, high", [(0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (45, 50, 0.7864, 0.9565)])
def test_wilson_interval(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(5, 3)


def test_success_summary_and_settings() -> None:
    from prismatic_tr.policy.closed_loop import EpisodeOutcome

    outcomes = [EpisodeOutcome(i, "x", "success" if i % 2 else "timeout", 10 + i) for i in range(4)]
    summary = SuccessSummary.of(outcomes)
    assert (summary.successes, summary.success_rate, summary.mean_steps) == (2, 0.5, 11.5)
    assert parse_setting("none") == Setting("none", 1.0)
    combo = parse_setting("vision:attention:0.5@0.25+llm:attention:0.5@0.25")
    assert [r.site for r in combo.reductions()] == ["vision", "llm"] and combo.label.count("+") == 1
    assert np.isclose(parse_setting("spatial_pool:4x4").reduction_ratio, 1 / 16)
    _ = torch  # torch is imported before tensorflow in this module


def test_bundled_policy_solves_unseen_episodes() -> None:
    """The shipped policy (prismatic_tr/assets/tabletop_policy) acts: most of 20 unseen task episodes succeed
    (its recorded evaluation: 93 % of 200)."""
    from prismatic_tr.policy import bundled
    from prismatic_tr.policy.train import UNSEEN_SEED_OFFSET

    if not (bundled.BUNDLED_POLICY_DIR / "config.json").is_file():
        pytest.skip(f"no bundled policy in {bundled.BUNDLED_POLICY_DIR}")
    vla, processor = bundled.load_bundled_policy()
    record = json.loads((bundled.BUNDLED_POLICY_DIR / "evaluation.json").read_text())
    assert record["evaluation"]["episodes"] == 200 and record["evaluation"]["success_rate"] >= 0.9
    seeds = list(range(UNSEEN_SEED_OFFSET, UNSEEN_SEED_OFFSET + 20))
    outcomes = run_episodes(vla.eval(), processor, seeds, bundled.UNNORM_KEY, batch_size=20)
    assert sum(o.success for o in outcomes) >= 15, [o.outcome for o in outcomes]


def test_tradeoff_plot_takes_rates_of_zero_and_one(tmp_path: Path) -> None:
    """Wilson bounds at 0 / n and n / n sit a hair past the rate in float (3.5e-18 above 0): the error bars must
    still draw (the main job's run on the bundled policy failed there once)."""
    from prismatic_tr.policy.report import plot_tradeoff

    records = []
    for site, k, speed in (("none", 100, 1.0), ("projector", 0, 1.4), ("llm", 100, 1.1)):
        low, high = wilson_interval(k, 100)
        records.append({"site": site, "method": site, "reduction_ratio": 0.5, "predict_action_speedup": speed,
                        "success_rate": k / 100, "success_ci_low": low, "success_ci_high": high})
    assert records[1]["success_ci_low"] > records[1]["success_rate"]  # the case itself
    assert plot_tradeoff(records, tmp_path / "t.png").stat().st_size > 0
