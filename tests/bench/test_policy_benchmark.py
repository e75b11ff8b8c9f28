"""benchmark_token_reduction: record fields and their consistency, fidelity of the baseline, the model left
untouched, bad arguments. Tiny reference model (random weights, fp32) on the CPU; timings never asserted."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import torch
from helpers.slow_step import slow_baseline_step
from PIL import Image

from prismatic_tr.bench.vla.benchmark import add_speedup_fields, benchmark_token_reduction, build_settings
from prismatic_tr.bench.vla.phases import PHASES
from prismatic_tr.bench.vla.report import format_table
from prismatic_tr.models import build_processor, build_prompt, build_vla
from prismatic_tr.vla import apply_token_reduction_to_vla, get_token_reduction, remove_token_reduction

METHODS = ["topk_magnitude", "attention_score", "random", "spatial_pool"]
RATIOS = [0.5, 0.25]
TIMING_KEYS = [f"{p}_ms{s}" for p in (*PHASES, "total") for s in ("", "_p10", "_p90")]
OTHER_KEYS = [
    "method", "reduction_ratio", "num_patches", "num_patches_in", "seq_len", "pixel_values_shape",
    "vision_features_shape", "reduced_features_shape", "projected_shape", "action_tokens_shape",
    "speedup", "prefill_speedup", "ideal_speedup", "efficiency", "prefill_ideal_speedup", "peak_memory_mb",
    "action_token_agreement", "action_mae", "first_token_kl", "total_gmacs", "vision_vs_baseline", "total_spread",
    "predict_action_spread", "noise_flag", "noise_reason",
    *[f"{p}_gmacs" for p in PHASES],
]

# (method, requested ratio, tokens the LLM receives out of 256)
TOKEN_CASES = [
    ("topk_magnitude", 0.5, 128),
    ("topk_magnitude", 0.25, 64),
    ("attention_score", 0.5, 128),
    ("random", 0.25, 64),
    ("spatial_pool", 0.25, 64),
]


def make_inputs(vla, batch_size: int = 1, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    images = [Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)) for _ in range(batch_size)]
    prompt = build_prompt("pick up the red block")
    return dict(build_processor(vla.config)([prompt] * batch_size, images, return_tensors="pt"))


def model_fingerprint(vla, inputs: dict) -> tuple:
    """Everything the benchmark could change: outputs, generated logits, state_dict, modes, reduction."""
    with torch.no_grad():
        logits = vla(**inputs).logits.clone()
        gen = vla.generate(inputs["input_ids"], inputs["pixel_values"], max_new_tokens=7, return_logits=True)
    state = {k: v.clone() for k, v in vla.state_dict().items()}
    modes = [m.training for m in vla.modules()]
    handle = get_token_reduction(vla)
    return logits, gen.logits.clone(), state, modes, None if handle is None else handle.settings


def assert_same_fingerprint(a: tuple, b: tuple) -> None:
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert list(a[2]) == list(b[2]) and all(torch.equal(a[2][k], b[2][k]) for k in a[2])
    assert a[3] == b[3] and a[4] == b[4]


@pytest.fixture(scope="module")
def vla():
    return build_vla("tiny", dtype=torch.float32, seed=0)


@pytest.fixture(scope="module")
def run(vla):
    """One sweep over every method, plus fingerprints of the model before and after it."""
    inputs = make_inputs(vla)
    before = model_fingerprint(vla, inputs)
    records = benchmark_token_reduction(vla, inputs, methods=METHODS, ratios=RATIOS, num_runs=3, warmup=1,
                                        progress=False)
    return records, before, model_fingerprint(vla, inputs)


def test_one_record_per_setting_baseline_first(run):
    records = run[0]
    settings = [(r["method"], r["reduction_ratio"]) for r in records]
    assert settings[0] == ("none", 1.0)
    assert len(records) == 1 + 3 * len(RATIOS) + 1  # spatial_pool once (merge size 2)
    assert len(set(settings)) == len(settings)


def test_record_fields_exist_and_are_finite(run):
    for rec in run[0]:
        missing = [k for k in TIMING_KEYS + OTHER_KEYS if k not in rec]
        assert not missing, f"{rec['method']}: missing {missing}"
        for key in TIMING_KEYS:
            assert math.isfinite(rec[key]) and rec[key] >= 0
        for phase in (*PHASES, "total"):
            assert rec[f"{phase}_ms_p10"] <= rec[f"{phase}_ms"] <= rec[f"{phase}_ms_p90"]
        # on the CPU: the process RSS high-water mark over one step, or None where it cannot be reset
        assert rec["peak_memory_mb"] is None or rec["peak_memory_mb"] > 0
        assert isinstance(rec["noise_flag"], bool) and (rec["noise_reason"] != "") == rec["noise_flag"]
        assert rec["vision_vs_baseline"] == pytest.approx(rec["vision_ms"] / run[0][0]["vision_ms"])


@pytest.mark.parametrize("method, ratio, tokens", TOKEN_CASES)
def test_token_counts_and_shapes(run, method, ratio, tokens):
    rec = next(r for r in run[0] if r["method"] == method and r["reduction_ratio"] == ratio)
    base = run[0][0]
    assert rec["num_patches"] == tokens and rec["num_patches_in"] == base["num_patches"] == 256
    assert rec["reduced_features_shape"] == [1, tokens, base["vision_features_shape"][2]]
    assert rec["projected_shape"][:2] == [1, tokens]
    assert rec["seq_len"] == base["seq_len"] - (256 - tokens)
    assert rec["action_tokens_shape"] == [1, 7]


def test_speedups_are_consistent(run):
    records = run[0]
    base = records[0]
    assert base["speedup"] == 1.0 and base["ideal_speedup"] == pytest.approx(1.0)
    for rec in records:
        assert rec["speedup"] == pytest.approx(base["total_ms"] / rec["total_ms"], rel=1e-12)
        assert rec["prefill_speedup"] == pytest.approx(base["prefill_ms"] / rec["prefill_ms"], rel=1e-12)
        assert rec["efficiency"] == pytest.approx(rec["speedup"] / rec["ideal_speedup"], rel=1e-12)
        if rec["num_patches"] < base["num_patches"]:
            assert rec["ideal_speedup"] > 1.0 and rec["prefill_ideal_speedup"] > 1.0


def test_macs_follow_token_counts(run):
    records = run[0]
    base = records[0]
    for rec in records[1:]:
        frac = rec["num_patches"] / base["num_patches"]
        assert rec["vision_gmacs"] == pytest.approx(base["vision_gmacs"], rel=1e-12)
        assert rec["projector_gmacs"] == pytest.approx(base["projector_gmacs"] * frac, rel=1e-9)
        assert rec["prefill_gmacs"] < base["prefill_gmacs"]
        assert rec["total_gmacs"] == pytest.approx(sum(rec[f"{p}_gmacs"] for p in PHASES), rel=1e-12)


def test_baseline_fidelity_is_perfect_and_step_matches_generate(run):
    records = run[0]
    base = records[0]
    assert base["action_token_agreement"] == 1.0 and base["action_mae"] == 0.0 and base["first_token_kl"] == 0.0
    for rec in records:  # the timed step decodes the same tokens as the model's own generate()
        assert rec["step_matches_generate"] == 1.0
        assert 0.0 <= rec["action_token_agreement"] <= 1.0 and rec["first_token_kl"] >= 0.0


def test_reduction_changes_the_answer(run):
    """On this model the first token's distribution moves once tokens are removed (the metric is live)."""
    assert any(r["first_token_kl"] > 0.0 for r in run[0][1:])


def test_model_unchanged_after_benchmark(run):
    _, before, after = run
    assert_same_fingerprint(before, after)


def test_attached_reduction_is_put_back(vla):
    inputs = make_inputs(vla)
    apply_token_reduction_to_vla(vla, "topk_magnitude", 0.5)
    try:
        before = model_fingerprint(vla, inputs)
        benchmark_token_reduction(vla, inputs, methods=["random"], ratios=[0.75], num_runs=1, warmup=0,
                                  progress=False)
        assert get_token_reduction(vla) is not None
        assert_same_fingerprint(before, model_fingerprint(vla, inputs))
    finally:
        remove_token_reduction(vla)


def test_batch_of_two(vla):
    records = benchmark_token_reduction(vla, make_inputs(vla, batch_size=2), methods=["topk_magnitude"],
                                        ratios=[0.5], num_runs=1, warmup=0, progress=False)
    assert [r["action_tokens_shape"] for r in records] == [[2, 7], [2, 7]]
    assert records[1]["reduced_features_shape"][:2] == [2, 128]


def test_ideal_speedup_formula():
    """Amdahl bound from baseline phases: V + P*K/N + F*(T+K)/(T+N) + D, reducer free."""
    base = {"vision_ms": 10.0, "reducer_ms": 0.0, "projector_ms": 2.0, "prefill_ms": 8.0, "decode_ms": 5.0,
            "total_ms": 25.0, "num_patches": 4}
    half = {**base, "num_patches": 2, "reducer_ms": 1.0, "total_ms": 23.0}
    add_speedup_fields([base, half], text_tokens=4)
    assert half["prefill_ideal_speedup"] == pytest.approx(8 / 6)
    assert half["ideal_speedup"] == pytest.approx(25.0 / (10.0 + 1.0 + 8.0 * 6 / 8 + 5.0))
    assert half["speedup"] == pytest.approx(25.0 / 23.0)
    assert half["reducer_pct_of_vision"] == pytest.approx(10.0)


def test_settings_table():
    settings = build_settings(["spatial_pool", "topk_magnitude"], [0.5, 0.5], spatial_merge_size=[2, 4])
    assert [(s.method, s.keep_ratio, s.spatial_merge_size) for s in settings] == [
        ("none", 1.0, 1), ("spatial_pool", 0.25, 2), ("spatial_pool", 1 / 16, 4), ("topk_magnitude", 0.5, 2)]


BAD_ARGS = [
    ({"methods": ["nope"]}, "nope"),
    ({"ratios": [0.0]}, "0.0"),
    ({"ratios": [1.5]}, "1.5"),
    ({"spatial_merge_size": 0}, "spatial_merge_size"),
    ({"num_runs": 0}, "num_runs"),
    ({"warmup": -1}, "warmup"),
    ({"unnorm_key": "nope"}, "nope"),
    ({"device": "cuda:7" if torch.cuda.is_available() else "cuda"}, "move the model"),
]


@pytest.mark.parametrize("kwargs, needle", BAD_ARGS)
def test_bad_arguments_raise(vla, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        benchmark_token_reduction(vla, make_inputs(vla), **{"progress": False, **kwargs})


def test_table_has_a_row_per_record(run):
    table = format_table(run[0]).splitlines()
    assert len(table) == 2 + len(run[0]) and table[2].startswith("none")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_path_reports_peak_memory():
    vla = build_vla("tiny", dtype=torch.bfloat16, device="cuda", seed=0)
    records = benchmark_token_reduction(vla, make_inputs(vla), methods=["topk_magnitude"], ratios=[0.5],
                                        num_runs=3, warmup=1, progress=False)
    for rec in records:
        assert rec["device"].startswith("cuda") and rec["peak_memory_mb"] > 0 and rec["step_memory_mb"] >= 0
        assert rec["total_ms"] > 0 and rec["step_matches_generate"] == 1.0  # step decodes what generate does
    assert records[1]["num_patches"] == 128


def test_hf_style_model_through_the_adapter():
    """An HF OpenVLA model is benchmarked through OpenVLAAdapter (what --vla_path loads); here the adapter
    wraps the reference model, whose modules it then uses, so the reduced counts must come through."""
    from prismatic_tr.models.adapter import OpenVLAAdapter

    vla = build_vla("tiny", seed=2)
    adapter = OpenVLAAdapter(vla, empty_token_id=None)
    records = benchmark_token_reduction(adapter, make_inputs(vla), methods=["topk_magnitude", "spatial_pool"],
                                       ratios=[0.5], num_runs=1, warmup=0, progress=False)
    assert [r["num_patches"] for r in records] == [256, 128, 64]
    assert records[0]["action_token_agreement"] == 1.0
    assert get_token_reduction(vla) is None


# ---------------------------------------------------------------- noise detection


def gauges(vision, p10=None, p90=None, end_to_end_p10_ms=None, end_to_end_p90_ms=None, **rule):
    from prismatic_tr.bench.measure.noise import NoiseRule, gauge_rows

    p10 = p10 or [100.0] * len(vision)
    p90 = p90 or [105.0] * len(vision)
    return gauge_rows(vision, p10, p90, NoiseRule(**rule), end_to_end_p10_ms=end_to_end_p10_ms,
                      end_to_end_p90_ms=end_to_end_p90_ms)


def test_quiet_run_is_not_flagged():
    """Numbers of the committed quiet run: vision within 1.2 % of the baseline, spread at most 1.06."""
    out = gauges([758.1, 765.2, 766.7, 756.1, 753.9], p10=[1388.8, 1181.7, 1108.4, 1010.3, 1172.9],
                 p90=[1437.4, 1255.6, 1154.3, 1059.3, 1209.4])
    assert [g.noise_flag for g in out] == [False] * 5 and all(g.noise_reason == "" for g in out)
    assert out[1].vision_vs_baseline == pytest.approx(765.2 / 758.1)


@pytest.mark.parametrize(("vision", "flags"), [
    ([800.0, 838.0, 802.0], [False, False, False]),  # 4.75 % off: inside the 5 % tolerance
    ([800.0, 842.0, 802.0], [False, True, False]),  # 5.25 % off: one slow row
    ([800.0, 700.0, 805.0], [False, True, False]),  # a fast row departs too
    ([1530.0, 800.0, 790.0, 810.0], [True, True, True, True]),  # a slow baseline: every speedup is off
])
def test_vision_departure_flags_rows(vision, flags):
    out = gauges(vision)
    assert [g.noise_flag for g in out] == flags
    for g, flag in zip(out, flags, strict=True):
        assert ("vision" in g.noise_reason) == flag
    if flags[0]:
        assert "every speedup is off" in out[0].noise_reason


def test_spread_flags_a_row():
    out = gauges([800.0, 800.0, 800.0], p10=[100.0, 100.0, 100.0], p90=[110.0, 125.0, 119.0])
    assert [g.noise_flag for g in out] == [False, True, False]
    assert "p90/p10 1.25" in out[1].noise_reason and out[1].total_spread == pytest.approx(1.25)
    assert gauges([800.0, 800.0], p90=[105.0, 125.0], spread_limit=1.3)[1].noise_flag is False


def test_end_to_end_spread_flags_a_row_with_steady_phases():
    """The headline divides the whole predict_action: a row whose phases were steady (phase-sum p90/p10 1.05) but
    whose predict_action was not (1.30) is flagged, and the reason names the end-to-end spread."""
    from prismatic_tr.bench.measure.noise import add_noise_fields

    records = [{"vision_ms": 800.0, "total_ms_p10": 100.0, "total_ms_p90": 105.0, "predict_action_ms_p10": 110.0,
                "predict_action_ms_p90": p90} for p90 in (115.0, 143.0, 120.0)]
    add_noise_fields(records)
    assert [r["noise_flag"] for r in records] == [False, True, False]
    assert records[1]["predict_action_spread"] == pytest.approx(1.3) and records[1]["total_spread"] == pytest.approx(1.05)
    assert "end-to-end predict_action p90/p10 1.30" in records[1]["noise_reason"]
    assert "phase-sum" not in records[1]["noise_reason"]
    with pytest.raises(ValueError, match="pass both or neither"):
        gauges([800.0], end_to_end_p10_ms=[1.0])


@pytest.mark.parametrize("rule", [{"vision_tolerance": 0.0}, {"vision_tolerance": 1.5}, {"spread_limit": 1.0}])
def test_noise_rule_rejects_bad_limits(rule):
    from prismatic_tr.bench.measure.noise import NoiseRule

    with pytest.raises(ValueError, match=next(iter(rule))):
        NoiseRule(**rule)


def test_injected_slow_baseline_is_flagged(vla, monkeypatch):
    from prismatic_tr.bench.measure.noise import noise_warnings
    from prismatic_tr.bench.vla import benchmark as vla_benchmark

    monkeypatch.setattr(vla_benchmark, "PolicyStep", slow_baseline_step(0.25))
    records = benchmark_token_reduction(vla, make_inputs(vla), methods=["topk_magnitude", "spatial_pool"],
                                        ratios=[0.5], num_runs=2, warmup=0, progress=False)
    assert [r["noise_flag"] for r in records] == [True, True, True]
    assert all(r["vision_vs_baseline"] < 0.5 for r in records[1:])
    assert "every speedup is off" in records[0]["noise_reason"]
    lines = noise_warnings(records, [3.5, 2.0, 1.0])
    assert lines[0].startswith("WARNING: noisy row none") and "3.50 / 2.00 / 1.00" in lines[-2]
    assert lines[-1].startswith("What to do") and "--num_runs" in lines[-1] and "--strict" in lines[-1]
    assert noise_warnings([{**r, "noise_flag": False} for r in records]) == []


def test_plot_and_table_mark_noisy_rows(run):
    from prismatic_tr.bench.vla.report import NOISE_LABEL, NOISY_MARK, build_figure

    records = [dict(r, noise_flag=False) for r in run[0]]
    records[2]["noise_flag"] = True
    fig = build_figure(records, title="t")
    try:
        rings = [line for line in fig.axes[0].get_lines() if line.get_label() == NOISE_LABEL]
        assert len(rings) == 1 and list(rings[0].get_xdata()) == [records[2]["tokens_kept"]]
        ticks = [t.get_text() for t in fig.axes[3].get_xticklabels()]
        assert ticks[2].endswith(NOISY_MARK) and not any(t.endswith(NOISY_MARK) for i, t in enumerate(ticks) if i != 2)
        assert "NOISY" in fig._suptitle.get_text()
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    rows = format_table(records).splitlines()
    assert rows[4].rstrip().endswith(NOISY_MARK) and not rows[3].rstrip().endswith(NOISY_MARK)


@pytest.mark.parametrize("name", ["benchmark_token_reduction", "format_table", "plot_results",
                                  "write_csv", "write_json"])
def test_bench_lazy_exports_resolve(name: str) -> None:
    """prismatic_tr.bench's lazy names come from the control-step benchmark's room, bench/vla."""
    import importlib

    import prismatic_tr.bench as bench

    module = importlib.import_module(bench._LAZY_EXPORTS[name])
    assert module.__name__.startswith("prismatic_tr.bench.vla.")
    assert getattr(bench, name) is getattr(module, name)


# ---------------------------------------------------------------- the main job's best-setting rule

def _row(setting: str, site: str, validation: float | None, speedup: float, test: float | None = None,
         noisy: bool = False, adapter: str | None = None) -> dict:
    return {"setting": setting, "site": site, "validation_success_rate": validation, "success_rate": test,
            "predict_action_speedup": speedup, "noise_flag": noisy, "adapter": adapter}


BASE = _row("none", "none", 0.90, 1.0, test=0.96)
# (case, rows besides the baseline, {site: chosen setting or None})
SELECTION_CASES = [
    ("the fastest within 2 points", [_row("a", "projector", 0.89, 1.2), _row("b", "projector", 0.88, 1.3)],
     {"projector": "b"}),
    ("a slower row is never chosen", [_row("slow", "projector", 0.95, 0.70)], {"projector": None}),
    ("exactly unreduced speed is not faster", [_row("same", "projector", 0.95, 1.0)], {"projector": None}),
    ("a noisy row is never chosen", [_row("noisy", "vision", 0.95, 2.2, noisy=True), _row("ok", "vision", 0.9, 1.6)],
     {"vision": "ok"}),
    ("chosen on validation, not on test",
     [_row("test-better", "vision", 0.80, 2.2, test=0.98), _row("val-better", "vision", 0.90, 1.5, test=0.84)],
     {"vision": "val-better"}),
    ("more than 2 points below on validation: none", [_row("lossy", "llm", 0.87, 1.1)], {"llm": None}),
    ("adapter rows are not candidates", [_row("with adapter", "vision", 0.99, 2.2, adapter="x")], {}),
    ("per site", [_row("p", "projector", 0.9, 1.3), _row("v", "vision", 0.5, 2.0)],
     {"projector": "p", "vision": None}),
]


@pytest.mark.parametrize("case, rows, expected", SELECTION_CASES, ids=[c[0] for c in SELECTION_CASES])
def test_best_setting_is_chosen_on_validation_among_faster_quiet_rows(case, rows, expected) -> None:
    from prismatic_tr.bench.vla.selection import best_lines, best_on_validation

    best = best_on_validation([BASE, *rows])
    assert {site: (r["setting"] if r else None) for site, r in best.items()} == expected
    lines = best_lines(best)
    assert len(lines) == len(expected)
    for line, (site, chosen) in zip(lines, expected.items(), strict=True):
        assert line.startswith(f"best {site} setting") and "validation" in line
        assert line.endswith(")") and (f": {chosen} (" in line if chosen else ": none (" in line)


def test_no_validation_episodes_chooses_nothing() -> None:
    from prismatic_tr.bench.vla.selection import best_on_validation

    assert best_on_validation([{**BASE, "validation_success_rate": None}, _row("a", "projector", 0.9, 2.0)]) == {}
    with pytest.raises(ValueError, match="max_loss=2 is not allowed"):
        best_on_validation([BASE], max_loss=2)


# ---------------------------------------------------------------- the machine a result was measured on

AMX = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n"
AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse4_2 avx2 fma\n"


@pytest.mark.parametrize("cpuinfo, model, features, dtype, why", [
    (AMX, "Intel(R) Xeon(R) Platinum 8480C", {"avx2": True, "avx512f": True, "avx512_bf16": True, "amx_bf16": True},
     torch.bfloat16, "bf16 in hardware (avx512_bf16, amx_bf16)"),
    (AVX2, "AMD EPYC 7B13", {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False},
     torch.float32, "no bf16 hardware"),
])
def test_cpu_features_and_why_auto_picked_its_dtype(cpuinfo, model, features, dtype, why) -> None:
    from prismatic_tr.bench.measure.devices import cpu_info, dtype_choice

    assert cpu_info(cpuinfo) == {"model": model, "features": features}
    picked, reason = dtype_choice("auto", torch.device("cpu"), cpuinfo=cpuinfo)
    assert picked == dtype and why in reason and reason.startswith("--dtype auto: ")
    assert dtype_choice("float32", torch.device("cpu"), cpuinfo=cpuinfo) == (torch.float32, "--dtype float32: given")
    with pytest.raises(ValueError, match="'fp8' is not allowed; choose one of"):
        dtype_choice("fp8", torch.device("cpu"))


# ---------------------------------------------------------------- shipped adapters beside their settings

def test_adapter_row_copies_its_settings_speed_and_measures_its_own_success() -> None:
    """The shipped projector adapter on the bundled policy, 2 episodes per split: its row follows its setting's,
    with that row's speed (the LoRA is merged) and its own success."""
    pytest.importorskip("peft")
    from prismatic_tr.bench.vla.policy_rows import add_adapter_rows

    speed = {"predict_action_ms": 500.0, "predict_action_speedup": 1.3, "speedup": 1.4, "noise_flag": True}
    records = [{"setting": "none", "site": "none", "method": "none", "success_rate": 0.9, "predict_action_ms": 650.0},
               {"setting": "diverse:0.1", "site": "projector", "method": "diverse", "success_rate": 0.1,
                "action_token_agreement": 0.5, **speed}]
    notes = add_adapter_rows(records, ["projector-diverse-0.1", "vision-diverse-0.1-0.25"], "test", 2, 2)
    assert [r["setting"] for r in records] == ["none", "diverse:0.1", "diverse:0.1 with adapter projector-diverse-0.1"]
    row = records[2]
    assert {k: row[k] for k in speed} == speed and row["speed_from"] == "diverse:0.1"
    assert row["adapter"] == "projector-diverse-0.1" and row["action_token_agreement"] is None
    assert row["policy_episodes"] == 2 and row["validation_episodes"] == 2
    assert 0 <= row["success_rate"] <= 1 and 0 <= row["validation_success_rate"] <= 1
    assert "speed copied" in notes["projector-diverse-0.1"]
    assert notes["vision-diverse-0.1-0.25"].startswith("not run: its setting vision:diverse:0.1@0.25 is not among")


def test_each_setting_costs_one_untimed_pass_beside_its_timed_ones(vla, monkeypatch):
    """Per setting: one MACs-and-memory step, ``warmup`` predict_action calls, two passes per timed round, and on
    OpenVLA one generate; the answer the fidelity fields read is the setting's first predict_action, so the
    baseline agrees with itself exactly and a reduced row does not."""
    from prismatic_tr.bench.vla import benchmark as bench_mod
    from prismatic_tr.bench.vla.step import PolicyStep

    calls: collections.Counter = collections.Counter()

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(PolicyStep, "run", counted("step", PolicyStep.run))
    monkeypatch.setattr(PolicyStep, "predict_action", counted("predict_action", PolicyStep.predict_action))
    monkeypatch.setattr(bench_mod, "model_answer", counted("generate", bench_mod.model_answer))
    records = benchmark_token_reduction(vla, make_inputs(vla), methods=["diverse"], ratios=[0.25], num_runs=2,
                                        warmup=1, progress=False)
    assert dict(calls) == {"step": 2 * (1 + 2), "predict_action": 2 * (1 + 2), "generate": 2}
    assert records[0]["action_token_agreement"] == 1.0 and records[0]["action_mae"] == 0.0
    assert records[0]["step_matches_generate"] == 1.0 and records[1]["step_matches_generate"] == 1.0


def test_metaworld_label_attention_reads_the_slots_rows_and_splits_by_camera_and_label(monkeypatch):
    """The slots' read rows (one before the first slot .. the last slot but one) over the visual tokens, renormalised,
    split by camera and label; the over-all rows average the observations."""
    from types import SimpleNamespace

    from prismatic_tr.bench.vla import metaworld_recall as recall
    from prismatic_tr.bench.vla import oft_attention

    patches, slots = 4, 2
    t = 1 + 2 * patches + 1 + 2 + slots + 1  # BOS, 2 cameras, proprio, 2 prompt tokens, slots, stop
    probs = torch.zeros(1, t, t)
    read = range(t - slots - 2, t - 2)
    for r in read:
        probs[0, r, 1] = 0.3          # camera 0, patch 0
        probs[0, r, 1 + patches + 3] = 0.1  # camera 1, patch 3
        probs[0, r, 0] = 0.6          # BOS: not visual, left out
    probs[0, t - 2, 2] = 1.0          # a row the head does not read
    monkeypatch.setattr(oft_attention, "layer_attention", lambda vla, inputs: [probs, probs])
    vla = SimpleNamespace(oft=SimpleNamespace(num_action_slots=slots))
    none = np.zeros(patches, dtype=bool)
    labels = {"corner3": {"object": np.array([1, 0, 0, 0], dtype=bool), "goal": none, "gripper": none},
              "gripperPOV": {"object": none, "goal": none, "gripper": np.array([0, 0, 1, 1], dtype=bool)}}
    got = recall.label_attention(vla, {}, labels)
    assert got["corner3"]["camera"] == pytest.approx(0.75) and got["corner3"]["object"] == pytest.approx(0.75)
    assert got["gripperPOV"]["camera"] == pytest.approx(0.25) and got["gripperPOV"]["gripper"] == pytest.approx(0.25)
    assert got["corner3"]["goal"] == 0.0
    area = {"corner3": {"object": 0.125, "goal": 0.0, "gripper": 0.0},
            "gripperPOV": {"object": 0.0, "goal": 0.0, "gripper": 0.25}}
    rows = recall.attention_rows({"push-v3": [got], "reach-v3": [got, got]}, {"push-v3": [area], "reach-v3": [area]})
    assert [(r["task"], r["camera"]) for r in rows][-2:] == [("all", "corner3"), ("all", "gripperPOV")]
    assert rows[-2]["observations"] == 3 and rows[-2]["object_attention"] == 0.75 and rows[-2]["object_area"] == 0.125
    assert "| corner3 | 75 % | 75.0 % / 12.5 % | 0.0 % / 0.0 % | 0.0 % / 0.0 % |" in recall.attention_markdown(rows)


def test_metaworld_recall_pools_by_labelled_patches_and_refuses_bad_flags(tmp_path, capsys):
    from benchmarks import metaworld_recall as command
    from prismatic_tr.bench.vla.metaworld_recall import markdown, pooled

    def row(task, camera, recall, patches, frames=2):
        return {"setting": "diverse:0.1", "task": task, "camera": camera, "observations": frames,
                "kept_tokens": 26.0, "object_patches": patches, "object_recall": recall, "goal_patches": 0.0,
                "goal_recall": None, "gripper_patches": 1.0, "gripper_recall": 1.0}

    rows = [row("push-v3", "corner3", 0.5, 2.0), row("reach-v3", "corner3", 1.0, 6.0),
            row("push-v3", "gripperPOV", 0.0, 4.0), row("reach-v3", "gripperPOV", None, 0.0)]
    out = {(r["setting"], r["camera"]): r for r in pooled(rows)}
    assert out[("diverse:0.1", "corner3")]["object_recall"] == pytest.approx((0.5 * 2 + 6) / 8)
    assert out[("diverse:0.1", "gripperPOV")]["object_recall"] == 0.0
    assert out[("diverse:0.1", "corner3")]["goal_recall"] is None
    table = markdown({"rows": rows})
    assert "| `diverse:0.1` | corner3 | 26.0 | 88 % (4.0) | - | 100 % (1.0) |" in table
    for argv, word in ((["--episodes", "0"], "episodes"), (["--tasks", "fly-v3"], "fly-v3"),
                       (["--vla_path", str(tmp_path)], "config.json")):
        with pytest.raises(SystemExit) as exit_info:
            command.parse(argv)
        assert exit_info.value.code == 2 and word in capsys.readouterr().err
