"""Tests of the speed-test harness: CSV row and units, flags, bad flags, reduced-forward op counts."""

from __future__ import annotations

import math

import pytest
import torch

from prismatic_tr.bench.measure.ops import count_kernel_ops, find_host_syncs
from prismatic_tr.bench.measure.timing import TimingStats
from prismatic_tr.bench.vit.speed import CSV_HEADER, SpeedConfig, summarize_runs
from vla_scripts import speed_test

TINY = ["--model", "topk_deit_tiny_patch16_224", "--keep_ratio", "0.5", "--reduction_loc", "3", "6", "9",
        "--warmup_iters", "1", "--test_iters", "2", "--test_multiple", "1"]


def _tiny_vit_macs(px: int, keep: float | None, locs: tuple[int, ...], dim: int = 192, heads: int = 3,
                   depth: int = 12, classes: int = 1000) -> int:
    """MACs of one DeiT-Tiny/16 forward, written out by hand (linear, attention matmuls, conv)."""
    patches = (px // 16) ** 2
    n = patches + 1
    macs = patches * 3 * 16 * 16 * dim + dim * classes
    for i in range(depth):
        n_attn = n
        macs += n_attn * dim * 3 * dim + 2 * n_attn * n_attn * dim + n_attn * dim * dim
        if keep is not None and i in locs:
            macs += n_attn * dim  # CLS query row against all keys, every head
            n = 1 + max(1, math.ceil(keep * (n - 1)))
        macs += 2 * n * dim * 4 * dim
    return macs


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[list[str], list[str]]:
    assert speed_test.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return lines[0].split(","), lines[1].split(",")


@pytest.mark.parametrize(
    ("argv", "px", "keep"),
    [
        (TINY + ["--input-size", "48", "--batch-size", "2"], 48, 0.5),
        (TINY + ["--input_size", "32", "--batch_size", "1", "--dummy_loader"], 32, 0.5),
        (["--model", "deit_tiny_patch16_224", "--input-size", "32", "--batch-size", "3", "--warmup_iters", "0",
          "--test_iters", "1", "--test_multiple", "2"], 32, None),
    ],
)
def test_csv_row_and_units(capsys: pytest.CaptureFixture[str], argv: list[str], px: int, keep: float | None) -> None:
    header, row = _run(capsys, argv)
    assert tuple(header) == CSV_HEADER
    values = dict(zip(header, row, strict=True))
    assert values["run_name"].startswith(argv[1])
    assert float(values["tp"]) > 0 and float(values["latency_ms"]) > 0 and float(values["time_total"]) > 0
    expected_gmacs = _tiny_vit_macs(px, keep, (3, 6, 9)) / 1e9
    assert float(values["flops"]) == pytest.approx(expected_gmacs, rel=1e-3)  # GMACs per image
    params_m = (5_717_416 - (197 - ((px // 16) ** 2 + 1)) * 192) / 1e6  # DeiT-Tiny at 224 px, minus pos_embed rows
    assert float(values["no_params"]) == pytest.approx(params_m, abs=1e-4)  # millions
    assert float(values["no_params_trainable"]) == pytest.approx(params_m, abs=1e-4)
    assert 50 < float(values["max_memory"]) < 64 * 1024  # MB: the process has torch loaded
    assert values["power"] == ""  # no GPU power on a CPU


@pytest.mark.parametrize(
    ("samples", "batch", "tp", "latency"),
    [([[10.0, 10.0, 10.0, 10.0]], 2, 200.0, 5.0), ([[20.0, 20.0], [40.0, 40.0], [10.0, 10.0]], 4, 200.0, 5.0)],
)
def test_summarize_runs_units(samples: list[list[float]], batch: int, tp: float, latency: float) -> None:
    runs = [TimingStats(s, sum(s) / 1e3) for s in samples]
    out = summarize_runs(runs, batch)
    assert out["tp"] == pytest.approx(tp)  # images / s, median over runs
    assert out["latency_ms"] == pytest.approx(latency)  # ms per image, median call / batch
    assert out["time_total"] == pytest.approx(sum(map(sum, samples)) / 1e3)  # seconds


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "0"], "batch_size=0"),
        (["--input-size", "abc"], "invalid int"),
        (["--dtype", "float64"], "invalid choice"),
        (["--cuda_graph", "--device", "cpu"], "cuda_graph needs a CUDA device"),
        (["--device", "cuda:0"] if not torch.cuda.is_available() else ["--device", "nodev"], "device"),
        (["--model", "no_such_model_224"], "unknown timm model"),
        (["--model", "deit_tiny_patch16_224", "--keep_ratio", "0.5"], "no method prefix"),
        (["--model", "topk_deit_tiny_patch16_224", "--keep_ratio", "1.5"], "keep_ratio=1.5"),
        (["--model", "topk_deit_tiny_patch16_224", "--keep_ratio", "0.5", "--reduction_loc", "3", "40"], "40"),
        (["--warmup_iters", "-1"], "warmup_iters=-1"),
    ],
)
def test_bad_flags_exit_with_message(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        speed_test.main(argv + ["--input-size", "32"] if "--input-size" not in argv else argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_config_rejects_compile_with_cuda_graph() -> None:
    with pytest.raises(ValueError, match="cuda_graph"):
        SpeedConfig(compile=True, cuda_graph=True, device="cpu")


def _small_vit(locs: list[int] | None) -> torch.nn.Module:
    from prismatic_tr.vit import create_model

    torch.manual_seed(0)
    if locs is None:
        return create_model("vit_tiny_patch16_224", img_size=64, depth=6).eval()
    return create_model("topk_vit_tiny_patch16_224", img_size=64, depth=6, keep_ratio=0.5, reduction_loc=locs).eval()


@pytest.mark.parametrize("locs", [[1], [1, 3], [0, 2, 4]])
def test_topk_adds_few_kernel_ops_and_no_syncs(locs: list[int]) -> None:
    # Batch 1: the target (<= 8 kernel-launching ops per location). At batch >= 2 the current topk
    # adds one aten.clone per location (K is copied for the CLS-row bmm); see benchmarks/results/vit/README.md.
    x = torch.randn(1, 3, 64, 64)
    base = count_kernel_ops(_small_vit(None), x)
    reduced_model = _small_vit(locs)
    reduced = count_kernel_ops(reduced_model, x)
    added = {name: n - base.get(name, 0) for name, n in reduced.items() if n != base.get(name, 0)}
    assert all(n % len(locs) == 0 for n in added.values())  # the same ops at every location
    assert 0 < sum(added.values()) / len(locs) <= 8
    assert find_host_syncs(reduced_model, x) == {}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_topk_compiles_without_graph_breaks(backend: str) -> None:
    """graph_breaks() really compiles with fullgraph=True and runs the compiled model."""
    from prismatic_tr.bench.measure.profiling import graph_breaks

    breaks, reasons = graph_breaks(_small_vit([1, 3]), torch.randn(1, 3, 64, 64), backend=backend)
    assert breaks == 0, reasons


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", [[], ["--cuda_graph"], ["--cuda_graph", "--dummy_loader"], ["--compile"]])
def test_gpu_modes_run(capsys: pytest.CaptureFixture[str], mode: list[str]) -> None:
    header, row = _run(capsys, TINY + ["--input-size", "64", "--batch-size", "2", "--device", "cuda"] + mode)
    values = dict(zip(header, row, strict=True))
    assert float(values["tp"]) > 0 and float(values["max_memory"]) > 0
    assert values["flops"] and (values["power"] == "" or float(values["power"]) > 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_event_timing() -> None:
    from prismatic_tr.bench.measure.timing import Timer, time_fn

    a = torch.randn(256, 256, device="cuda")
    stats = time_fn(lambda: a @ a, warmup=2, repeats=5, device="cuda")
    assert stats.n == 5 and all(t > 0 for t in stats.samples_ms)
    timer = Timer("cuda")
    for _ in range(3):
        timer.start()
        a @ a
        timer.mark("mm")
        timer.stop()
    assert len(timer.results()["mm"]) == 3


def test_rows_say_where_they_ran_and_an_older_csv_is_refused_before_timing(capsys, tmp_path) -> None:
    from prismatic_tr.bench.measure.devices import cpu_info

    header, row = _run(capsys, TINY + ["--input-size", "32", "--batch-size", "1"])
    values = dict(zip(header, row, strict=True))
    assert values["device"] == "cpu" and values["dtype"] == "float32"
    assert values["cpu"].startswith(str(cpu_info()["model"]).replace(",", " ")) and "," not in values["cpu"]
    old = tmp_path / "old.csv"
    old.write_text("run_name,tp,latency_ms\nx,1,2\n")
    with pytest.raises(SystemExit) as exit_info:
        speed_test.main(TINY + ["--input-size", "32", "--csv", str(old)])
    assert exit_info.value.code == 2 and "holds the columns" in capsys.readouterr().err
    assert old.read_text() == "run_name,tp,latency_ms\nx,1,2\n"
