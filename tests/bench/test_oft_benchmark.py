"""The control-step benchmark on OpenVLA-OFT (``prismatic_tr.bench.vla.oft_step``): the phases (names, their sum, MACs),
the reduced visual tokens (2 images x K), baseline-first interleaving, fidelity against the model's own
``predict_action``, the llm site inside the one pass, and the command with ``--preset tiny-oft`` / a bad preset. Tiny OFT preset
(2 images, proprio 8, chunk 8 x 7, L1 head; random weights, fp32) on the CPU; timings never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from prismatic_tr.bench.measure.timing import Timer
from prismatic_tr.bench.vla import benchmark as vla_benchmark
from prismatic_tr.bench.vla import job
from prismatic_tr.bench.vla.benchmark import add_speedup_fields, benchmark_token_reduction
from prismatic_tr.bench.vla.oft_step import OFTStep
from prismatic_tr.bench.vla.phases import OFT_PHASES, OFT_STEP
from prismatic_tr.bench.vla.report import format_table
from prismatic_tr.bench.vla.step import StepInputs, prepare_inputs, timed_call
from prismatic_tr.models import build_processor, build_vla
from prismatic_tr.reducers import num_kept
from prismatic_tr.vla import get_token_reduction, visual_token_count
from vla_scripts import benchmark

PATCHES = 256  # per 224 px image of the tiny towers
SETTINGS = ["diverse:0.25", "vision:diverse:0.1@0.25"]
LLM = "llm:attention:0.5@0.25"  # visual tokens dropped after layer 1 of 2 inside the one pass
# (spec, keep per image): the visual tokens the language model receives are 2 images x K
TOKEN_CASES = [("diverse:0.25", num_kept(PATCHES, 0.25)), ("vision:diverse:0.1@0.25", num_kept(PATCHES, 0.1))]


@pytest.fixture(scope="module")
def vla():
    return build_vla("tiny-oft", dtype=torch.float32, seed=0)


@pytest.fixture(scope="module")
def inputs(vla) -> dict:
    images, proprio_dim = job.model_input_sizes(vla)
    assert (images, proprio_dim) == (2, 8)
    return job.sample_inputs(build_processor(vla.config), "pick up the red block", 1, 224, 0, images, proprio_dim)


@pytest.fixture(scope="module")
def run(vla, inputs):
    """One benchmark over a projector, a vision and an llm setting, with the model's actions before and after."""
    before = predict(vla, inputs)
    records = benchmark_token_reduction(vla, inputs, methods=[], extra_settings=[*SETTINGS, LLM], num_runs=2,
                                        warmup=0, progress=False)
    return records, before, predict(vla, inputs)


def predict(vla, inputs: dict) -> np.ndarray:
    actions, _ = vla.predict_action(input_ids=inputs["input_ids"], pixel_values=inputs["pixel_values"],
                                    proprio=inputs["proprio"], unnorm_key=next(iter(vla.norm_stats)))
    return actions


def test_inputs_hold_two_images_and_proprio(inputs):
    assert list(inputs["pixel_values"].shape) == [1, 12, 224, 224] and list(inputs["proprio"].shape) == [1, 8]
    assert not torch.equal(inputs["pixel_values"][:, :6], inputs["pixel_values"][:, 6:])
    assert float(inputs["proprio"].abs().max()) <= 1.0


def test_records_are_ofts_phases_baseline_first(run):
    records = run[0]
    assert [r["setting"] for r in records] == ["none", *SETTINGS, LLM]
    for rec in records:
        assert rec["model_kind"] == "openvla-oft"
        for phase in (*OFT_PHASES, "total"):
            assert rec[f"{phase}_ms_p10"] <= rec[f"{phase}_ms"] <= rec[f"{phase}_ms_p90"] and rec[f"{phase}_ms"] > 0
        assert "prefill_ms" not in rec and "decode_ms" not in rec
        assert rec["total_gmacs"] == pytest.approx(sum(rec[f"{p}_gmacs"] for p in OFT_PHASES), rel=1e-12)
        assert rec["predict_action_ms"] > 0 and rec["llm_speedup"] > 0


def test_phases_sum_to_the_step(vla, inputs):
    """Every timed run's phases add up to its total (consecutive marks of one Timer)."""
    step = OFTStep(vla, prepare_inputs(vla, inputs, torch.device("cpu")))
    assert step.phases is OFT_STEP and step.num_patches == 2 * PATCHES
    timer = Timer("cpu")
    with torch.no_grad():
        for _ in range(2):
            timer.start()
            step.run(timed_call(timer))
            timer.stop()
    samples = timer.results()
    assert set(samples) == {*OFT_PHASES, "total"}
    for i in range(2):
        assert sum(samples[p][i] for p in OFT_PHASES) == pytest.approx(samples["total"][i], rel=1e-9)


@pytest.mark.parametrize("spec, keep", TOKEN_CASES)
def test_reduced_visual_tokens_are_two_images_times_k(run, vla, spec, keep):
    base, rec = run[0][0], next(r for r in run[0] if r["setting"] == spec)
    llm_dim = vla.config.text_config.hidden_size
    assert base["num_patches"] == base["num_patches_in"] == rec["num_patches_in"] == 2 * PATCHES
    assert rec["num_patches"] == rec["llm_visual_tokens"] == 2 * keep
    assert rec["reduced_features_shape"][:2] == [1, 2 * keep]
    assert rec["projected_shape"] == [1, 2 * keep + 1, llm_dim]  # the proprio token after the visual ones
    assert rec["seq_len"] == base["seq_len"] - 2 * (PATCHES - keep)
    assert rec["action_hidden_shape"] == [1, 56, llm_dim] and rec["actions_shape"] == [1, 8, 7]


def test_the_llm_row_keeps_every_visual_token_until_its_layer(run, vla):
    base, rec = run[0][0], next(r for r in run[0] if r["setting"] == LLM)
    assert rec["num_patches"] == 2 * PATCHES and rec["llm_visual_tokens"] == num_kept(2 * PATCHES, 0.5)
    assert rec["seq_len"] == base["seq_len"]  # the pass starts with every token; it drops them after layer 1
    assert rec["action_hidden_shape"] == [1, 56, vla.config.text_config.hidden_size]
    assert rec["actions_shape"] == [1, 8, 7] and rec["action_max_abs"] > 0


def test_fidelity_against_predict_action(run):
    records = run[0]
    assert records[0]["action_mae"] == 0.0 and records[0]["action_max_abs"] == 0.0
    for rec in records:  # the timed step computes what the model's own predict_action returns
        assert rec["step_action_max_diff"] <= 1e-6
        assert rec["action_token_agreement"] is None and rec["first_token_kl"] is None
    assert all(r["action_mae"] > 0.0 for r in records[1:]), "a reduction must change the actions"


def test_model_unchanged_after_benchmark(run, vla):
    _, before, after = run
    np.testing.assert_array_equal(before, after)
    assert get_token_reduction(vla) is None and visual_token_count(vla) == 2 * PATCHES


def test_peak_memory_on_the_cpu(run):
    writable = Path("/proc/self/clear_refs").exists()
    for rec in run[0]:
        if writable and rec["peak_memory_source"] is not None:
            assert rec["peak_memory_source"] == "process_rss_high_water_mark"
            assert rec["peak_memory_mb"] > 0 and rec["step_memory_mb"] >= 0
        else:
            assert rec["peak_memory_mb"] is None


def test_table_has_ofts_columns_and_no_policy_columns(run):
    header = format_table(run[0]).splitlines()[0].split()
    assert {"llm", "head", "vision", "proj"} <= set(header)
    assert not {"prefill", "decode", "success", "agree"} & set(header)


def test_baseline_first_interleaving(vla, inputs, monkeypatch):
    """Timed rounds run A B C, C B A, A B C: the unreduced baseline opens the first round."""
    order: list[int] = []

    class Spy(OFTStep):
        def run(self, call=None):  # type: ignore[no-untyped-def]
            if getattr(call, "__qualname__", "").startswith("timed_call"):
                order.append(visual_token_count(self.user_model))
            return super().run(call)

    monkeypatch.setattr(vla_benchmark, "OFTStep", Spy)
    benchmark_token_reduction(vla, inputs, methods=[], extra_settings=SETTINGS, num_runs=3, warmup=1,
                              progress=False)
    a, b, c = 2 * PATCHES, 2 * TOKEN_CASES[0][1], 2 * TOKEN_CASES[1][1]
    assert order == [a, b, c, c, b, a, a, b, c]


def test_ideal_speedup_formula_of_the_one_pass():
    """V + P*K/N + L*(T+K)/(T+N) + H, the one pass in the prefill's place and the head in the decode's."""
    base = {"vision_ms": 10.0, "reducer_ms": 0.0, "projector_ms": 2.0, "llm_ms": 8.0, "head_ms": 1.0,
            "total_ms": 21.0, "num_patches": 4}
    half = {**base, "num_patches": 2, "reducer_ms": 1.0, "total_ms": 19.0}
    add_speedup_fields([base, half], text_tokens=4, phases=OFT_STEP)
    assert half["llm_ideal_speedup"] == pytest.approx(8 / 6) and "prefill_speedup" not in half
    assert half["ideal_speedup"] == pytest.approx(21.0 / (10.0 + 1.0 + 8.0 * 6 / 8 + 1.0))


def test_oft_step_refuses_an_openvla_model(inputs):
    openvla = build_vla("tiny", dtype=torch.float32, seed=0)
    step_inputs = StepInputs(inputs["input_ids"], inputs["attention_mask"], inputs["pixel_values"][:, :6])
    with pytest.raises(ValueError, match="NativeOpenVLAOFT"):
        OFTStep(openvla, step_inputs)


# ---------------------------------------------------------------- the command


def test_command_accepts_the_oft_presets():
    for preset in ("cpu-bench-oft", "tiny-oft"):
        cfg = benchmark.parse_config(["--preset", preset, "--policy_episodes", "0"])  # nothing built
        assert cfg.preset == preset


@pytest.mark.parametrize("preset", ["cpu-bench-ofx", "oft"])
def test_command_refuses_a_bad_preset(preset, capsys, monkeypatch):
    monkeypatch.setattr(job, "load_model", lambda *a: pytest.fail("a model was built for a bad preset"))
    with pytest.raises(SystemExit) as exc:
        benchmark.main(benchmark.parse_config(["--preset", preset]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--preset {preset!r} is not allowed" in err and "cpu-bench-oft" in err


def test_tiny_oft_run_of_the_command(tmp_path, capsys):
    saved = torch.get_num_threads()
    out = tmp_path / "bench"
    try:
        records = benchmark.main(benchmark.parse_config([
            "--preset", "tiny-oft", "--methods", "[]", "--settings", f"[diverse:0.25,{LLM}]",
            "--num_runs", "1", "--warmup", "0", "--dtype", "float32", "--progress", "false", "--num_threads", "1",
            "--policy_episodes", "3", "--output_dir", str(out),
        ]))
    finally:
        torch.set_num_threads(saved)
    stdout = capsys.readouterr().out
    assert "the bundled OFT-style policy runs at its own size" in stdout and "llm (the one parallel pass)" in stdout
    assert [r["setting"] for r in records] == ["none", "diverse:0.25", LLM]
    assert all(r.get("success_rate") is None for r in records)  # no episodes were run
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["config"]["preset"] == "tiny-oft"
    assert "skipped_settings" not in data["meta"]
    assert data["meta"]["policy_fidelity"].startswith("not measured here: the bundled OFT-style policy")
    assert [r["num_patches"] for r in data["records"]] == [2 * PATCHES, 2 * num_kept(PATCHES, 0.25), 2 * PATCHES]
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
