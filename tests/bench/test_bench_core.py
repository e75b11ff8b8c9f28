"""Tests of the shared bench core: timing summaries and ordering, MAC counting, op counting, host syncs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from prismatic_tr.bench.measure.flops import count_macs, count_macs_by_module, count_macs_by_op, empty_weights
from prismatic_tr.bench.measure.ops import (
    count_dispatched_ops,
    count_kernel_ops,
    find_host_syncs,
    kernel_ops,
    ops_added,
)
from prismatic_tr.bench.measure.timing import Timer, interleaved, summarize, time_fn

# ---------------------------------------------------------------- timing


@pytest.mark.parametrize("samples", [[3.0], [5.0, 1.0], list(range(1, 11)), [0.5, 9.0, 2.0, 2.0, 7.5, 1.0, 4.0]])
def test_summarize_matches_numpy(samples: list[float]) -> None:
    s = summarize(samples)
    arr = np.asarray(samples, dtype=float)
    assert s["n"] == len(samples)
    assert s["median"] == pytest.approx(np.median(arr))
    assert s["p10"] == pytest.approx(np.percentile(arr, 10))
    assert s["p90"] == pytest.approx(np.percentile(arr, 90))
    assert s["mean"] == pytest.approx(arr.mean())


def test_time_fn_calls_and_samples() -> None:
    calls: list[int] = []
    stats = time_fn(lambda: calls.append(1), warmup=3, repeats=7, device="cpu")
    assert len(calls) == 10
    assert stats.n == 7 and all(t >= 0 for t in stats.samples_ms)
    assert stats.total_s * 1e3 >= sum(stats.samples_ms) * 0.99
    assert set(stats.as_dict()) == {"median", "p10", "p90", "mean", "n", "total_s"}


def test_interleaved_runs_round_robin() -> None:
    order: list[str] = []
    out = interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, warmup=1, repeats=3)
    assert order == ["a", "b"] * 4
    assert set(out) == {"a", "b"} and out["a"].n == 3 and out["b"].n == 3


def test_timer_phases() -> None:
    timer = Timer("cpu")
    for _ in range(4):
        timer.start()
        timer.mark("vision")
        with timer.phase("llm"):
            sum(range(1000))
        timer.stop()
    res = timer.results()
    assert list(res) == ["vision", "llm", "total"]
    assert all(len(v) == 4 for v in res.values())
    for v, llm, tot in zip(res["vision"], res["llm"], res["total"], strict=True):
        assert tot == pytest.approx(v + llm)
    assert timer.summary()["llm"]["n"] == 4


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: time_fn(lambda: None, warmup=-1, repeats=2), "warmup"),
        (lambda: time_fn(lambda: None, warmup=0, repeats=0), "repeats"),
        (lambda: interleaved({}, 1, 1), "at least one"),
        (lambda: summarize([]), "at least one"),
        (lambda: Timer("cpu").mark("x"), "before start"),
        (lambda: time_fn(lambda: None, 0, 1, device="nodevice"), "nodevice"),
    ],
)
def test_timing_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- flops


@pytest.mark.parametrize(("b", "n", "din", "dout"), [(1, 5, 8, 16), (3, 7, 32, 4)])
def test_linear_macs(b: int, n: int, din: int, dout: int) -> None:
    layer = torch.nn.Linear(din, dout)
    assert count_macs(layer, torch.randn(b, n, din)) == b * n * din * dout
    assert count_macs_by_op(layer, torch.randn(b, n, din)) == {"aten.addmm": b * n * din * dout}


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("b", "h", "lq", "lk", "d"), [(1, 2, 5, 5, 8), (2, 3, 4, 9, 16)])
def test_sdpa_macs_counted(device: str, b: int, h: int, lq: int, lk: int, d: int) -> None:
    q = torch.randn(b, h, lq, d, device=device)
    kv = torch.randn(b, h, lk, d, device=device)
    assert count_macs(F.scaled_dot_product_attention, q, kv, kv) == 2 * b * h * lq * lk * d


def test_macs_by_module_has_children() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    by_mod = count_macs_by_module(model, torch.randn(3, 4))
    assert by_mod["Global"] == 3 * (4 * 8 + 8 * 2)
    assert by_mod["Sequential.0"] == 3 * 4 * 8 and by_mod["Sequential.2"] == 3 * 8 * 2


# The study's convention (GMACs per image): DeiT-B/16, TopK keep 0.1 at blocks 3/6/9.
REFERENCE_GMACS = [
    ("deit_base_patch16_224", 224, {}, 17.57),
    ("deit_base_patch16_224", 448, {}, 78.52),
    ("topk_deit_base_patch16_224", 224, {"keep_ratio": 0.1, "reduction_loc": [3, 6, 9]}, 5.55),
    ("topk_deit_base_patch16_224", 448, {"keep_ratio": 0.1, "reduction_loc": [3, 6, 9]}, 24.73),
]


@pytest.mark.parametrize(("name", "px", "kwargs", "gmacs"), REFERENCE_GMACS)
def test_reference_gmacs_within_half_percent(name: str, px: int, kwargs: dict, gmacs: float) -> None:
    from prismatic_tr.vit import create_model

    with empty_weights():
        model = create_model(name, pretrained=False, img_size=px, **kwargs).eval()
    macs = count_macs(model, torch.empty(2, 3, px, px, device="meta")) / 2 / 1e9
    assert abs(macs / gmacs - 1.0) < 0.005


def test_empty_weights_is_undone() -> None:
    with empty_weights():
        meta = torch.nn.Linear(3, 3)
    real = torch.nn.Linear(3, 3)
    assert meta.weight.device.type == "meta" and real.weight.device.type == "cpu"


# ---------------------------------------------------------------- ops


def _mixed(x: torch.Tensor) -> torch.Tensor:
    y = x.view(-1).reshape(x.shape).transpose(0, 1)  # views only
    return (y + 1).mm(x) * 2


def test_count_ops_and_views() -> None:
    x = torch.randn(4, 4)
    ops = count_dispatched_ops(_mixed, x)
    assert ops["aten.add"] == 1 and ops["aten.mm"] == 1 and ops["aten.mul"] == 1
    assert ops["aten.view"] >= 1 and ops["aten.transpose"] == 1
    launching = count_kernel_ops(_mixed, x)
    assert launching == {"aten.add": 1, "aten.mm": 1, "aten.mul": 1}
    assert kernel_ops(ops) == launching


def _sync_item(x: torch.Tensor) -> float:
    return x.sum().item()


def _sync_mask(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0]


def _sync_nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x)


def _sync_branch(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if (x.sum() > 0) else x


def _sync_masked_select(x: torch.Tensor) -> torch.Tensor:
    return torch.masked_select(x, x > 0)


def _sync_unique(x: torch.Tensor) -> torch.Tensor:
    return torch.unique(x)


def _clean(x: torch.Tensor) -> torch.Tensor:
    idx = x.sum(-1).topk(2).indices
    return x.gather(0, idx.unsqueeze(-1).expand(-1, x.shape[-1])).softmax(-1)


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_sync_item, "aten._local_scalar_dense"),
        (_sync_mask, "aten.index(bool mask)"),
        (_sync_nonzero, "aten.nonzero"),
        (_sync_branch, None),  # is_nonzero or _local_scalar_dense depending on torch
        (_sync_masked_select, "aten.masked_select"),
        (_sync_unique, None),  # aten._unique2 or aten.unique_dim, depending on torch
        (_clean, "none"),
    ],
)
def test_find_host_syncs(fn, expected: str | None) -> None:
    syncs = find_host_syncs(fn, torch.randn(5, 3))
    if expected == "none":
        assert syncs == {}
    elif expected is None:
        assert sum(syncs.values()) >= 1
    else:
        assert syncs[expected] >= 1


def test_ops_added() -> None:
    from collections import Counter

    assert ops_added(Counter(a=2, b=1), Counter(a=3, b=1, c=2)) == Counter(a=1, c=2)


def test_interleaved_keeps_contexts_out_of_the_timed_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """A setting's context (e.g. attaching a reduction) wraps each call but is not timed (fake clock)."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from prismatic_tr.bench.measure import timing

    clock, log = [0.0], []
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    @contextmanager
    def slow_setup():
        log.append("enter")
        clock[0] += 100.0
        yield
        clock[0] += 100.0
        log.append("exit")

    def call(name: str, seconds: float):
        return lambda: (log.append(name), clock.__setitem__(0, clock[0] + seconds))

    out = interleaved({"a": call("a", 1.0), "b": call("b", 2.0)}, warmup=1, repeats=2, device="cpu",
                      contexts={"a": slow_setup})
    assert out["a"].samples_ms == [1000.0, 1000.0] and out["b"].samples_ms == [2000.0, 2000.0]
    assert log == ["enter", "a", "exit", "b"] * 3  # warm-up round first, then the timed rounds
    with pytest.raises(ValueError, match="'c'"):
        interleaved({"a": call("a", 1.0)}, contexts={"c": slow_setup})


# ---------------------------------------------------------------- GPU paths, checked on the CPU


@pytest.mark.parametrize(("device", "current", "expected"), [("cuda:1", 0, "cuda:1"), ("cuda", 2, "cuda:2"),
                                                             ("cuda:0", 3, "cuda:0")])
def test_event_device(device: str, current: int, expected: str) -> None:
    from prismatic_tr.bench.measure.timing import event_device

    assert event_device(torch.device(device), current) == torch.device(expected)


def test_events_are_recorded_on_the_measured_devices_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measuring cuda:1 while cuda:0 is current: the events go to cuda:1's stream (fake CUDA API)."""
    from prismatic_tr.bench.measure import timing

    recorded: list[object] = []

    class FakeEvent:
        def __init__(self, enable_timing: bool = False) -> None:
            pass

        def record(self, stream: object = None) -> None:
            recorded.append(stream)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    timing._Stopwatch("cuda:1").point()
    timing._Stopwatch("cuda").point()
    assert recorded == ["stream of cuda:1", "stream of cuda:0"]


def test_device_time_counts_each_kernel_once() -> None:
    """Profiler rows: each aten op carries its kernels' time, and the kernels are rows of their own."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from prismatic_tr.bench.measure.profiling import device_time_us

    def row(name: str, device: DeviceType, us: float, attr: str = "self_device_time_total") -> SimpleNamespace:
        return SimpleNamespace(name=name, device_type=device, **{attr: us})

    rows = [row("aten::mm", DeviceType.CPU, 30.0), row("sm80_gemm", DeviceType.CUDA, 30.0),
            row("aten::add", DeviceType.CPU, 5.0), row("add_kernel", DeviceType.CUDA, 5.0),
            row("cudaLaunchKernel", DeviceType.CPU, 0.0), row("Memcpy HtoD", DeviceType.CUDA, 2.0)]
    assert device_time_us(rows) == 37.0  # summing every row would give 72
    assert device_time_us([row("k", DeviceType.CUDA, 4.0, attr="self_cuda_time_total")]) == 4.0  # torch 2.2 name


@pytest.mark.parametrize(
    ("index", "visible", "expected"),
    [(0, None, 0), (3, None, 3), (0, "2,3", 2), (1, "2,3", 3), (2, "2,3", None), (0, "", None),
     (0, "GPU-8932f937-d72c,1", "GPU-8932f937-d72c"), (1, "GPU-8932f937-d72c,1", 1), (0, "MIG-4b5c", None),
     (1, "0,-1,2", None), (0, " 3 , 1", 3), (0, "abc,1", None)],
)
def test_nvml_target_from_cuda_visible_devices(index: int, visible: str | None, expected: object) -> None:
    from prismatic_tr.bench.measure.power import nvml_target

    assert nvml_target(index, visible) == expected


def test_match_uuid() -> None:
    from prismatic_tr.bench.measure.power import match_uuid

    uuids = ["GPU-12ab-0000", "GPU-8932f937-d72c", "GPU-8999-0000"]
    assert match_uuid("GPU-8932", uuids) == 1 and match_uuid("GPU-89", uuids) is None  # ambiguous
    assert match_uuid("GPU-ffff", uuids) is None


def test_power_monitor_reads_the_nvml_device_behind_torchs_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_VISIBLE_DEVICES=2,3: torch's cuda:0 is NVML's device 2 (fake pynvml, torch without UUIDs)."""
    import sys
    from types import SimpleNamespace

    from prismatic_tr.bench.measure.power import PowerMonitor

    opened: list[int] = []
    fake = SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 4,
                           nvmlDeviceGetHandleByIndex=lambda i: opened.append(i) or f"h{i}",
                           nvmlDeviceGetPowerUsage=lambda h: 150_000)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(name="fake"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monitor = PowerMonitor("cuda:0")
    assert monitor._open() and opened == [2] and monitor._handle == "h2"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4b5c")
    assert not PowerMonitor("cuda:0")._open()  # no reading rather than another device's


def test_graph_breaks_fails_when_fullgraph_compile_fails() -> None:
    """torch._dynamo.explain reports 0 breaks for a module drawing from a torch.Generator; the helper
    compiles for real and raises."""
    import torch._dynamo as dynamo

    from prismatic_tr.bench.measure.profiling import FullGraphError, graph_breaks

    class DrawsFromGenerator(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.generators: dict[str, torch.Generator] = {}

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            key = str(x.device)
            if key not in self.generators:
                self.generators[key] = torch.Generator(device=x.device).manual_seed(0)
            return x + torch.rand(x.shape, generator=self.generators[key])

    x = torch.randn(2, 3)
    assert dynamo.explain(DrawsFromGenerator())(x).graph_break_count == 0
    with pytest.raises(FullGraphError, match="DrawsFromGenerator"):
        graph_breaks(DrawsFromGenerator(), x, backend="aot_eager")
    assert graph_breaks(torch.nn.Linear(3, 2), x, backend="aot_eager") == (0, [])


# ---------------------------------------------------------------- package layout


def test_bench_packages_import_light() -> None:
    """The three rooms (measure, vit, vla) import none of their modules, nor torch, until asked."""
    import subprocess
    import sys

    code = ("import sys, prismatic_tr.bench, prismatic_tr.bench.measure, prismatic_tr.bench.vit, "
            "prismatic_tr.bench.vla; print(sorted(m for m in sys.modules if m.startswith('prismatic_tr.bench')"
            " or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(["prismatic_tr.bench", "prismatic_tr.bench.measure", "prismatic_tr.bench.vit",
                               "prismatic_tr.bench.vla"])


def test_auto_dtype_is_bf16_only_where_the_device_computes_it_in_hardware(monkeypatch) -> None:
    from prismatic_tr.bench.measure import devices

    avx2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
    amx = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16\n"
    assert not devices.cpu_has_native_bf16(avx2) and devices.cpu_has_native_bf16(amx)
    assert not devices.cpu_has_native_bf16("")
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda cpuinfo=None: False)
    assert devices.fast_dtype(torch.device("cpu")) == torch.float32
    assert devices.fast_dtype(torch.device("cuda")) == torch.bfloat16
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda cpuinfo=None: True)
    assert devices.fast_dtype(torch.device("cpu")) == torch.bfloat16
