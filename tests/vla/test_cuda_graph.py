"""CUDA-graph ``predict_action`` (prismatic_tr.vla.cuda_graph) and its benchmark (prismatic_tr.bench.vla.captured).

On any machine: capture is refused off CUDA before any work; the device part a graph captures, run eagerly on the
CPU through the device-side prompt and a prepared KV cache, gives exactly ``predict_action``'s answer at every site
never syncs and makes no tensor from host data; the roofline's arithmetic, the noise flags, the job's flags. ``CapturedPolicy`` / ``CapturedStep``
run twice: on a CUDA GPU (skipped elsewhere; captured calls equal eager ones within bfloat16 tolerance) and on the
CPU with a stand-in graph that reruns what it captured (exactly equal): every site on OpenVLA and OFT, batch 1 and
2, new inputs after the capture; attaching, removing or replacing weights captures again; bad calls refused; the
prefill-only graph.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch

import prismatic_tr.models.prompt as prompt_module
from prismatic_tr.bench.measure.ops import find_capture_hazards
from prismatic_tr.bench.vla.captured import _spread_fields, phase_bytes, roofline
from prismatic_tr.bench.vla.captured_job import CapturedJob
from prismatic_tr.models import build_oft_vla, build_vla
from prismatic_tr.models.generation import ready_cache
from prismatic_tr.vla import apply_token_reduction_spec, remove_token_reduction
from prismatic_tr.vla.api import live_handles
from prismatic_tr.vla.cuda_graph import PARTS, CapturedPolicy, CapturedStep, call_inputs
from prismatic_tr.vla.scope import reduction_call

SETTINGS = ["none", "diverse:0.25", "diverse_merge:0.25", "vision:diverse:0.1@0.25", "vision:diverse_merge:0.25@0.25",
            "llm:attention:0.5@0.25"]
CUDA = torch.cuda.is_available()


@functools.cache
def model(family: str, device: str = "cpu") -> torch.nn.Module:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if family == "openvla":
        return build_vla("tiny", "dinosiglip-vit-so-224px", dtype=dtype, device=device, seed=0).eval()
    oft = {"num_images_in_input": 2, "proprio_dim": 8, "action_head": "l1_regression", "attention": "causal"}
    return build_oft_vla("tiny", oft=oft, dtype=dtype, device=device, seed=0).eval()


def inputs(family: str, batch: int = 1, seed: int = 0, device: str = "cpu") -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (batch, 9), generator=g)
    ids[:, 0] = 1
    channels = 6 if family == "openvla" else 12
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    out = {"input_ids": ids.to(device),
           "pixel_values": torch.randn(batch, channels, 224, 224, generator=g).to(device, dtype)}
    if family == "openvla-oft":
        out["proprio"] = torch.rand(batch, 8, generator=g) * 2 - 1
    return out


def actions(result: Any) -> np.ndarray:
    return np.asarray(result[0] if isinstance(result, tuple) else result, dtype=np.float64)


# --- any machine ---


def test_capture_is_refused_off_cuda() -> None:
    vla = model("openvla")
    for make in (lambda: CapturedPolicy(vla), lambda: CapturedStep(vla, call_inputs("openvla", **inputs("openvla")))):
        with pytest.raises(ValueError, match="CUDA GPU; it is on 'cpu'"):
            make()


@pytest.mark.parametrize("family", ["openvla", "openvla-oft"])
def test_the_captured_part_is_predict_action(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a graph captures (the family's device part, the prompt built on the device, the cache prepared
    beforehand, one reduction call) run eagerly gives predict_action's answer exactly, never syncs and makes no
    tensor from host data (which a capture refuses: found on an H200 with torch 2.11)."""
    vla, example = model(family), inputs(family, batch=2)
    key = vla._check_unnorm_key(None)
    parts, dim = PARTS[family], vla.get_action_dim(key)
    try:
        for spec in SETTINGS:
            apply_token_reduction_spec(vla, spec)
            with torch.no_grad():
                eager = vla.predict_action(**example, unnorm_key=key)
                with monkeypatch.context() as m:
                    m.setattr(prompt_module, "reads_on_host", lambda *_: False)  # the path CUDA tensors take
                    call = call_inputs(family, **example)

                    def device_part(cache: Any, call: dict = call) -> tuple[torch.Tensor, ...]:
                        with reduction_call(vla):
                            return parts.device(vla, dim, call, cache)

                    def cache() -> Any:  # made before the capture, as CapturedStep does
                        return ready_cache(vla.language_model, example["pixel_values"]) if parts.needs_cache else None

                    outputs = device_part(cache())
                    hazards = find_capture_hazards(device_part, cache())
            assert np.array_equal(actions(parts.host(vla, outputs, key)), actions(eager)), spec
            assert not hazards, (spec, hazards)
    finally:
        remove_token_reduction(vla)


def test_roofline_takes_the_slower_of_memory_and_compute() -> None:
    peaks = {"bandwidth_gb_s": 1000.0, "bf16_tflop_s": 100.0}
    out = roofline({"vision": 2 * 10**9, "llm": 10**9}, {"vision": 50.0, "llm": 5000.0}, peaks)
    assert out["vision_roofline_ms"] == pytest.approx(2.0)  # 2 GB at 1 TB/s; 100 GFLOP at 100 TFLOP/s is 1 ms
    assert out["llm_roofline_ms"] == pytest.approx(100.0)  # 10 TFLOP at 100 TFLOP/s; 1 GB is 1 ms
    assert out["roofline_ms"] == pytest.approx(102.0)


@pytest.mark.parametrize("family", ["openvla", "openvla-oft"])
def test_phase_bytes_count_each_weight_read(family: str) -> None:
    vla = model(family)
    nbytes = lambda mod: sum(p.numel() * p.element_size() for p in mod.parameters())  # noqa: E731
    lm = vla.language_model
    layers = nbytes(lm.model.layers) + nbytes(lm.model.norm)
    got = phase_bytes(vla, family, tokens=7)
    assert got["vision"] == nbytes(vla.vision_backbone) and got["reducer"] == 0
    if family == "openvla":
        assert got["decode"] == 6 * got["prefill"] == 6 * (layers + nbytes(lm.lm_head))
    else:
        assert got["llm"] == layers and got["head"] == nbytes(vla.action_head)
        assert got["projector"] == nbytes(vla.projector) + nbytes(vla.proprio_projector)


def test_noise_flags_follow_the_row_and_the_unreduced_spread() -> None:
    rows = [{"captured_ms": 10.0, "captured_ms_p10": 9.9, "captured_ms_p90": 10.1},
            {"captured_ms": 5.0, "captured_ms_p10": 4.0, "captured_ms_p90": 6.0},
            {"captured_ms": 4.0, "captured_ms_p10": 3.9, "captured_ms_p90": 4.1}]
    _spread_fields(rows, "captured")
    assert [r["captured_noise_flag"] for r in rows] == [False, True, False]
    assert rows[1]["captured_speedup"] == pytest.approx(2.0) and "row p90/p10 1.50" in rows[1]["captured_noise_reason"]
    rows[0]["captured_ms_p90"] = 20.0
    _spread_fields(rows, "captured")
    assert all(r["captured_noise_flag"] for r in rows) and "unreduced" in rows[2]["captured_noise_reason"]


@pytest.mark.parametrize("field, value, message", [
    ("presets", ("openvla-13b",), "openvla-13b"), ("batch_sizes", (0,), "batch_sizes"),
    ("settings", ("vision:diverse:2@0.25",), "2"), ("num_runs", 0, "num_runs=0"), ("dtype", "fp8", "fp8")])
def test_the_job_refuses_bad_flags(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CapturedJob(**{field: value})


def test_the_command_exits_2_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    if CUDA:
        pytest.skip("this machine has CUDA")
    import runpy
    from pathlib import Path

    command = runpy.run_path(str(Path(__file__).parents[2] / "benchmarks/gpu/captured.py"))
    with pytest.raises(SystemExit) as exit_info:
        command["main"](["--presets", "tiny"])
    assert exit_info.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err


# --- CapturedPolicy: on a CUDA GPU, and on the CPU with a stand-in graph that reruns what it captured ---


class Rerun:
    """A CPU stand-in for a captured graph: ``replay`` reruns the captured function on the same input buffers
    and writes its outputs into the captured ones in place, as a CUDA graph's replay does."""

    def __init__(self, run: Any, make_cache: Any, outputs: tuple[torch.Tensor, ...]) -> None:
        self.run, self.make_cache, self.outputs = run, make_cache, outputs

    def replay(self) -> None:
        with torch.no_grad():
            for out, new in zip(self.outputs, self.run(self.make_cache()), strict=True):
                out.copy_(new)


def stand_in_capture(run: Any, make_cache: Any, device: torch.device, warmup: int, pool: Any = None) -> tuple:
    with torch.no_grad():
        for _ in range(warmup):
            run(None)
        outputs = run(make_cache())
    return Rerun(run, make_cache, outputs), outputs


@pytest.fixture(params=["cpu-stand-in", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not CUDA, reason="needs a CUDA GPU (CUDA graphs)")])])
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """"cuda": the real capture; "cpu-stand-in": the same CapturedPolicy / CapturedStep code with :class:`Rerun`
    in place of the CUDA graph (and the device check)."""
    if request.param == "cpu-stand-in":
        from prismatic_tr.bench.vla import captured
        from prismatic_tr.models.family import family_of
        from prismatic_tr.vla import cuda_graph

        monkeypatch.setattr(cuda_graph, "capture", stand_in_capture)
        for module in (cuda_graph, captured):
            monkeypatch.setattr(module, "check_capturable", lambda vla: family_of(vla).name)
        return "cpu"
    return "cuda"


@pytest.mark.parametrize("family", ["openvla", "openvla-oft"])
def test_captured_equals_eager_at_every_site(family: str, device: str) -> None:
    vla = model(family, device)
    policy = CapturedPolicy(vla)
    tolerance = 1e-2 if device == "cuda" else 0.0  # bfloat16 on the GPU; the stand-in reruns the same float32 code
    try:
        for spec in SETTINGS:
            apply_token_reduction_spec(vla, spec)
            for batch in (1, 2):
                for seed in (0, 1):  # the second call replays the graph the first captured, on new inputs
                    example = inputs(family, batch, seed, device)
                    with torch.no_grad():
                        eager = vla.predict_action(**example, unnorm_key="bridge_orig")
                    captured = policy.predict_action(**example, unnorm_key="bridge_orig")
                    np.testing.assert_allclose(actions(captured), actions(eager), atol=tolerance, rtol=0,
                                               err_msg=f"{spec} batch {batch} seed {seed}")
                    if family == "openvla-oft":  # OFT's pair: the hidden states are the caller's own copy
                        assert captured[1].data_ptr() not in {t.data_ptr() for s in policy.steps.values()
                                                              for t in s.outputs}
            assert len(policy.steps) == 2  # one graph per batch size under this setting; the last setting's dropped
    finally:
        remove_token_reduction(vla)


def test_attaching_removing_or_replacing_weights_captures_again(device: str) -> None:
    vla = model("openvla", device)
    policy, example = CapturedPolicy(vla), inputs("openvla", device=device)
    tolerance = 1e-2 if device == "cuda" else 0.0
    try:
        unreduced = policy.predict_action(**example, unnorm_key="bridge_orig")
        first = next(iter(policy.steps.values()))
        assert policy.predict_action(**example, unnorm_key="bridge_orig") is not None
        assert next(iter(policy.steps.values())) is first  # replayed, not captured again
        apply_token_reduction_spec(vla, "diverse:0.1")
        reduced = policy.predict_action(**example, unnorm_key="bridge_orig")
        assert next(iter(policy.steps.values())) is not first and len(policy.steps) == 1
        with torch.no_grad():
            np.testing.assert_allclose(reduced, vla.predict_action(**example, unnorm_key="bridge_orig"),
                                       atol=tolerance)
        remove_token_reduction(vla)
        np.testing.assert_allclose(policy.predict_action(**example, unnorm_key="bridge_orig"), unreduced,
                                   atol=tolerance)
        step = next(iter(policy.steps.values()))
        param = next(vla.parameters())
        saved = param.data
        param.data = saved.clone()  # a new tensor where the graph read the old one
        try:
            policy.predict_action(**example, unnorm_key="bridge_orig")
            assert next(iter(policy.steps.values())) is not step
        finally:
            param.data = saved
    finally:
        remove_token_reduction(vla)


def test_bad_calls_are_refused_before_any_capture(device: str) -> None:
    vla = model("openvla", device)
    policy, example = CapturedPolicy(vla), inputs("openvla", device=device)
    for kwargs, message in (({"do_sample": True}, "do_sample"), ({"unnorm_key": "nope"}, "nope"),
                            ({"pixel_values": None}, "pixel_values"), ({"proprio": np.zeros(8)}, "takes none")):
        with pytest.raises(ValueError, match=message):
            policy.predict_action(**{**example, "unnorm_key": "bridge_orig", **kwargs})
    assert not policy.steps
    call = call_inputs("openvla", **example)
    step = CapturedStep(vla, call, "bridge_orig")
    with pytest.raises(ValueError, match="differ from the captured"):
        step(call_inputs("openvla", **inputs("openvla", batch=2, device=device)))
    with pytest.raises(ValueError, match="tokens=0"):
        CapturedStep(vla, call, "bridge_orig", tokens=0)
    for spec in ("random:0.5", "vision:random:0.5@0.25"):   # a replay would repeat the draw made at capture
        apply_token_reduction_spec(vla, spec)
        try:
            with pytest.raises(ValueError, match=f"{spec!r} draws at random on every call"):
                policy.predict_action(**example, unnorm_key="bridge_orig")
        finally:
            remove_token_reduction(vla)
    assert not policy.steps


def test_the_prefill_only_graph_gives_the_first_token(device: str) -> None:
    vla = model("openvla", device)
    call = call_inputs("openvla", **inputs("openvla", batch=2, device=device))
    first = CapturedStep(vla, call, "bridge_orig", tokens=1)(call)
    with torch.no_grad():
        tokens = vla.action_tokens(call["input_ids"], call["pixel_values"], None, 7)
    assert first.shape == (2, 1) and np.array_equal(first[:, 0], tokens[:, 0].cpu().numpy())


@pytest.mark.parametrize("family", ["openvla", "openvla-oft"])
def test_the_benchmark_rows(family: str, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from prismatic_tr.bench.vla.captured import benchmark_captured

    if device == "cpu":  # what the stand-in needs of torch.cuda besides the graph
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *_: None)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *_: 0)
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    vla = model(family, device)
    example = inputs(family, batch=2, device=device)
    peaks = {"bandwidth_gb_s": 1000.0, "bf16_tflop_s": 100.0}
    apply_token_reduction_spec(vla, "diverse:0.5")  # the user's own reduction: back after the run
    try:
        rows = benchmark_captured(vla, example, ["diverse:0.25", "vision:diverse:0.1@0.25"], num_runs=1, warmup=0,
                                  peaks=peaks)
        assert [h.settings.label for h in live_handles(vla)] == ["diverse:0.5"]
    finally:
        remove_token_reduction(vla)
    assert [r["setting"] for r in rows] == ["none", "diverse:0.25", "vision:diverse:0.1@0.25"]
    assert [r["llm_visual_tokens"] for r in rows] == [256 * (1 if family == "openvla" else 2)] + \
        [64 * (1 if family == "openvla" else 2)] + [26 * (1 if family == "openvla" else 2)]
    for r in rows:
        assert r["captured_equal"] or device == "cuda", r["setting"]
        assert r["captured_ms"] > 0 and r["eager_ms"] > 0 and r["roofline_ms"] > 0
        assert ("decode_share" in r) == (family == "openvla")
        assert r["total_gmacs"] < rows[0]["total_gmacs"] or r is rows[0]
    assert rows[0]["captured_speedup"] == 1.0


def test_the_job_writes_one_file_per_preset_and_batch(device: str, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Any) -> None:
    import json

    from prismatic_tr.bench.vla import captured_job

    if device == "cpu":
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *_: None)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *_: 0)
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
        monkeypatch.setattr(captured_job, "check_cuda", lambda name: torch.device("cpu"))
        monkeypatch.setattr(captured_job, "measured_peaks", lambda dev: {
            "gpu": "stand-in", "bandwidth_gb_s": 1000.0, "bf16_tflop_s": 100.0, "datasheet": None})
        monkeypatch.setattr(captured_job, "timing_meta", lambda command, dtype, dev: {"command": command})
    job = captured_job.CapturedJob(presets=("tiny-oft", "tiny"), batch_sizes=(1,), settings=("diverse:0.25",),
                                   num_runs=1, warmup=0, output_dir=tmp_path,
                                   dtype="bfloat16" if device == "cuda" else "float32")
    written, failed = captured_job.run_captured_job(job, device)
    assert not failed and [p.name for p in written] == ["tiny-oft_b1.json", "tiny_b1.json"]
    for path in written:
        data = json.loads(path.read_text())
        assert [r["setting"] for r in data["rows"]] == ["none", "diverse:0.25"] and data["meta"]["batch_size"] == 1
