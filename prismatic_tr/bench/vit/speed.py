"""One speed test of a timm ViT (optionally with in-backbone token reduction): one CSV row, in the columns the
earlier DeiT study's speed script printed.

>>> cfg = SpeedConfig(model="topk_deit_base_patch16_224", input_size=448, batch_size=8,
...                   keep_ratio=0.1, reduction_loc=[3, 6, 9], device="cpu")
>>> row = run_speed_test(cfg)       # dict with the CSV_HEADER keys
>>> print(format_csv(row))

Units (CSV_HEADER): tp images/s; latency_ms ms per image (median call time / batch); time_total s of all
timed calls; flops GMACs per image (see ``bench.measure.flops``); max_memory MB (CUDA: peak allocated by
torch; CPU: the process's peak resident set size); no_params / no_params_trainable in millions; power mean W
over the timed loop (pynvml, CUDA only; empty elsewhere); device and dtype as run; cpu the CPU's model and the
features that decide its speed (``bench.measure.devices.CPU_FEATURES``, space-separated), so every row says where
it was measured.
"""

from __future__ import annotations

import copy
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prismatic_tr.bench.measure.devices import DTYPES, as_device, cpu_feature_words, cpu_info
from prismatic_tr.bench.measure.flops import count_macs, empty_weights
from prismatic_tr.bench.measure.power import PowerMonitor
from prismatic_tr.bench.measure.timing import TimingStats, summarize, synchronize, time_fn

CSV_HEADER: tuple[str, ...] = (
    "run_name", "tp", "latency_ms", "time_total", "flops", "max_memory", "no_params", "no_params_trainable",
    "power", "device", "dtype", "cpu",
)


@dataclass
class SpeedConfig:
    """One speed test. ``model`` is a timm name, optionally with a method prefix (``topk_deit_...``)."""

    model: str = "deit_base_patch16_224"
    input_size: int = 224  # square input side in pixels (the model is built with img_size=input_size)
    batch_size: int = 1
    keep_ratio: float | None = None  # reduction kwargs go to prismatic_tr.vit.create_model
    reduction_loc: list[int] | None = None
    r: int | None = None
    warmup_iters: int = 5  # untimed calls (compilation / graph capture happen before these)
    test_iters: int = 20  # timed calls per measurement
    test_multiple: int = 3  # independent measurements; tp is their median
    dummy_loader: bool = False  # draw each batch from a host pool and copy it in (as a data loader would)
    device: str = "cpu"
    dtype: str = "float32"
    compile: bool = False  # torch.compile the model
    fullgraph: bool = False  # with compile: fail on any graph break
    cuda_graph: bool = False  # capture the forward in a CUDA graph and replay it
    run_name: str | None = None
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # further timm kwargs

    def __post_init__(self) -> None:
        for name in ("input_size", "batch_size", "test_iters", "test_multiple"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        if isinstance(self.warmup_iters, bool) or not isinstance(self.warmup_iters, int) or self.warmup_iters < 0:
            raise ValueError(f"warmup_iters={self.warmup_iters!r} must be an int >= 0")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is not supported; allowed: {', '.join(DTYPES)}")
        dev = as_device(self.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={self.device!r} requested but CUDA is not available here; use --device cpu")
        if self.cuda_graph and dev.type != "cuda":
            raise ValueError(f"cuda_graph needs a CUDA device, got device={self.device!r}")
        if self.cuda_graph and self.compile:
            raise ValueError("choose one of compile / cuda_graph (compile with mode='reduce-overhead' uses graphs)")
        if self.keep_ratio is not None and not 0.0 < self.keep_ratio <= 1.0:
            raise ValueError(f"keep_ratio={self.keep_ratio!r} must be in (0, 1]")

    def check_model(self) -> None:
        """Build the model with meta parameters (no memory, no weights, milliseconds): ``ValueError`` for an
        unknown timm model or reduction settings it does not accept, before anything real is built."""
        try:
            build_model(self, meta=True)
        except ValueError:
            raise
        except (RuntimeError, TypeError, AssertionError) as err:
            raise ValueError(f"model={self.model!r} cannot be built with these settings: {err}") from None

    def reduction_kwargs(self) -> dict[str, Any]:
        """Only the reduction kwargs that were given."""
        out = {"keep_ratio": self.keep_ratio, "reduction_loc": self.reduction_loc, "r": self.r}
        return {k: v for k, v in out.items() if v is not None}

    def name(self) -> str:
        """``run_name`` or one derived from the settings."""
        if self.run_name:
            return self.run_name
        parts = [self.model, f"{self.input_size}px", f"bs{self.batch_size}", self.dtype]
        if self.keep_ratio is not None:
            parts.append(f"keep{self.keep_ratio:g}")
        if self.r is not None:
            parts.append(f"r{self.r}")
        if self.reduction_loc:
            parts.append("loc" + "-".join(str(i) for i in self.reduction_loc))
        parts += [p for p, on in (("compile", self.compile), ("cudagraph", self.cuda_graph)) if on]
        return "_".join(parts)


def build_model(cfg: SpeedConfig, meta: bool = False) -> nn.Module:
    """The model of ``cfg`` in eval mode on its device and dtype (or with meta parameters when ``meta``)."""
    from prismatic_tr.vit import create_model

    kwargs = {**cfg.extra, "img_size": cfg.input_size, **cfg.reduction_kwargs()}
    if meta:
        with empty_weights():
            return create_model(cfg.model, pretrained=False, **kwargs).eval()
    torch.manual_seed(cfg.seed)
    model = create_model(cfg.model, pretrained=False, **kwargs).eval()
    return model.to(device=cfg.device, dtype=DTYPES[cfg.dtype])


def gmacs_per_image(cfg: SpeedConfig, model: nn.Module | None = None) -> float:
    """GMACs per image, counted on a meta-device copy (no compute); falls back to ``model`` at batch 1."""
    x = torch.empty(1, 3, cfg.input_size, cfg.input_size, device="meta")
    try:
        return count_macs(build_model(cfg, meta=True), x) / 1e9
    except (RuntimeError, NotImplementedError):
        if model is None:
            raise
        real = torch.zeros(1, 3, cfg.input_size, cfg.input_size, device=cfg.device, dtype=DTYPES[cfg.dtype])
        return count_macs(model, real) / 1e9


def make_input(cfg: SpeedConfig, batch_size: int | None = None) -> torch.Tensor:
    """A random (B, 3, H, W) batch on the device, in the dtype of the run."""
    gen = torch.Generator().manual_seed(cfg.seed)
    b = batch_size or cfg.batch_size
    x = torch.randn(b, 3, cfg.input_size, cfg.input_size, generator=gen)
    return x.to(device=cfg.device, dtype=DTYPES[cfg.dtype])


def capture_cuda_graph(model: Callable[[torch.Tensor], Any], x: torch.Tensor) -> Callable[[], Any]:
    """Capture ``model(x)`` in a CUDA graph; returns a replay function (inputs copied into the static one)."""
    if x.device.type != "cuda":
        raise ValueError(f"CUDA graph capture needs a CUDA tensor, got device {x.device}")
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):  # warm up allocator and lazy inits outside the capture
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_out = model(static_x)

    def replay() -> Any:
        graph.replay()
        return static_out

    replay.static_input = static_x  # type: ignore[attr-defined]
    return replay


def forward_fn(model: nn.Module, cfg: SpeedConfig, x: torch.Tensor) -> Callable[[], Any]:
    """The zero-argument callable that is timed: compiled / graph-replayed / plain, with or without loader."""
    runner: Callable[[torch.Tensor], Any] = model
    if cfg.compile:
        runner = torch.compile(model, fullgraph=cfg.fullgraph)
    if cfg.cuda_graph:
        replay = capture_cuda_graph(runner, x)
        if not cfg.dummy_loader:
            return replay
        pool = [x.detach().cpu().pin_memory() for _ in range(2)]
        state = {"i": 0}

        def loader_replay() -> Any:
            state["i"] += 1
            replay.static_input.copy_(pool[state["i"] % len(pool)], non_blocking=True)  # type: ignore[attr-defined]
            return replay()

        return loader_replay
    if not cfg.dummy_loader:
        return lambda: runner(x)
    host = [torch.randn_like(x, device="cpu") for _ in range(4)]
    if x.device.type == "cuda":
        host = [h.pin_memory() for h in host]
    counter = {"i": 0}

    def loader_step() -> Any:
        counter["i"] += 1
        batch = host[counter["i"] % len(host)]
        batch = batch.to(x.device, non_blocking=True) if x.device.type != "cpu" else batch.clone()
        return runner(batch)

    return loader_step


def peak_memory_mb(device: torch.device | str) -> float:
    """CUDA: peak bytes allocated by torch since the last reset; CPU: peak RSS of this process; in MB."""
    dev = as_device(device)
    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated(dev) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10


def count_params(model: nn.Module) -> tuple[float, float]:
    """(all, trainable) parameter counts in millions."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return total / 1e6, trainable / 1e6


def measure(fn: Callable[[], Any], cfg: SpeedConfig) -> tuple[list[TimingStats], float | None]:
    """Warm up, then ``test_multiple`` timed runs of ``test_iters`` calls; returns stats and mean power (W)."""
    with torch.no_grad():
        for _ in range(cfg.warmup_iters):
            fn()
        synchronize(cfg.device)
        with PowerMonitor(cfg.device) as power:
            runs = [time_fn(fn, warmup=0, repeats=cfg.test_iters, device=cfg.device) for _ in range(cfg.test_multiple)]
    return runs, power.mean_watts


def summarize_runs(runs: list[TimingStats], batch_size: int) -> dict[str, float]:
    """tp (images/s, median over runs of batch * calls / summed call time), latency_ms, time_total (s)."""
    tps = [batch_size * r.n / (sum(r.samples_ms) / 1e3) for r in runs]
    all_ms = [t for r in runs for t in r.samples_ms]
    return {
        "tp": summarize(tps)["median"],
        "latency_ms": summarize(all_ms)["median"] / batch_size,
        "time_total": sum(r.total_s for r in runs),
    }


def run_speed_test(cfg: SpeedConfig, model: nn.Module | None = None) -> dict[str, Any]:
    """Build (unless given), time and count one configuration; returns a dict keyed by ``CSV_HEADER``."""
    model = build_model(cfg) if model is None else model
    flops = gmacs_per_image(cfg, model)
    n_params, n_trainable = count_params(model)
    x = make_input(cfg)
    dev = as_device(cfg.device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    with torch.no_grad():
        fn = forward_fn(model, cfg, x)
    runs, watts = measure(fn, cfg)
    stats = summarize_runs(runs, cfg.batch_size)
    return {
        "run_name": cfg.name(), **stats, "flops": flops, "max_memory": peak_memory_mb(dev),
        "no_params": n_params, "no_params_trainable": n_trainable, "power": watts,
        "device": str(dev), "dtype": cfg.dtype, "cpu": cpu_words(),
    }


def cpu_words() -> str:
    """``"AMD EPYC (avx2)"``: the CPU's model and its speed-deciding features, without commas (a CSV cell)."""
    model = str(cpu_info()["model"]).replace(",", " ")
    return f"{model} ({cpu_feature_words().replace(', ', ' ')})"


def format_csv(row: dict[str, Any], header: bool = False) -> str:
    """One CSV line of ``row`` in ``CSV_HEADER`` order (floats to 6 significant digits, None empty), header optional."""
    cells = []
    for key in CSV_HEADER:
        value = row.get(key)
        cells.append("" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value))
    line = ",".join(cells)
    return ",".join(CSV_HEADER) + "\n" + line if header else line


def check_csv(path: Path) -> None:
    """``ValueError`` when ``path`` exists and holds other columns than ``CSV_HEADER`` (an older harness's)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open() as f:
        held = f.readline().rstrip("\n")
    if held != ",".join(CSV_HEADER):
        raise ValueError(f"--csv {str(path)!r} holds the columns {held!r}, not {','.join(CSV_HEADER)!r}; give a "
                         "new file")


def append_csv(path: Path, line: str) -> None:
    """Append one row to ``path``, writing the header first when the file is new or empty (:func:`check_csv`
    first)."""
    check_csv(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a") as f:
        if new:
            f.write(",".join(CSV_HEADER) + "\n")
        f.write(line + "\n")


def profile_line(cfg: SpeedConfig) -> str:
    """One line of per-forward profiler figures for ``cfg`` (built again; plain eager forward)."""
    from prismatic_tr.bench.measure.profiling import profile_forward

    model, x = build_model(cfg), make_input(cfg)
    prof = profile_forward(lambda: model(x), device=cfg.device, repeats=2)
    launches = "n/a (CPU)" if prof.kernel_launches is None else f"{prof.kernel_launches:.0f}"
    return (f"profile {cfg.name()}: dispatched_ops={prof.dispatched_ops:.0f} kernel_launches={launches} "
            f"device_ms={prof.device_time_ms:.2f} wall_ms={prof.wall_time_ms:.2f} "
            f"device/wall={prof.device_fraction:.2f}")


def clone_with_reduction(base: nn.Module, method: str, **kwargs: Any) -> nn.Module:
    """A deep copy of ``base`` (same weights) with ``method`` attached via ``apply_vit_reduction``."""
    from prismatic_tr.vit import apply_vit_reduction

    reduced = copy.deepcopy(base)
    apply_vit_reduction(reduced, method, **kwargs)
    return reduced
