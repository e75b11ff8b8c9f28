"""Input-size x batch-size sweeps of a baseline ViT against its token-reduced copy (same weights).

For each input size the baseline is built once and the reduced model is a deep copy with the reduction
attached; for each batch size the two are timed interleaved (A B A B ...). Rows are appended to a CSV as they
finish, so an interrupted sweep resumes where it stopped.

>>> cfg = SweepConfig(model="topk_deit_base_patch16_224", keep_ratio=0.1, reduction_loc=[3, 6, 9])
>>> rows = run_sweep(cfg, csv_path=Path("out/sweep.csv"))
>>> print(markdown_tables(rows)); plot_speedup(rows, Path("out/speedup.png"))
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prismatic_tr.bench.measure.profiling import profile_forward, reduction_op_delta
from prismatic_tr.bench.measure.timing import interleaved
from prismatic_tr.bench.vit.speed import (
    SpeedConfig,
    build_model,
    clone_with_reduction,
    forward_fn,
    gmacs_per_image,
    make_input,
)

SWEEP_COLUMNS: tuple[str, ...] = (
    "model", "method", "device", "dtype", "mode", "input_size", "batch_size", "tokens", "baseline_tp", "reduced_tp",
    "speedup", "baseline_gmacs", "reduced_gmacs", "flop_ratio", "speedup_over_flop_ratio", "baseline_ms", "reduced_ms",
    "ops_added_per_loc", "ops_added", "host_syncs", "baseline_ops", "reduced_ops", "baseline_launches",
    "reduced_launches", "baseline_device_ms", "baseline_wall_ms", "reduced_device_ms", "reduced_wall_ms",
)
# The last eight columns come from torch.profiler (per forward) and are filled only with ``profile=True``;
# launches only on CUDA. device_ms: GPU kernel time on CUDA, time inside aten operators on a CPU.


@dataclass
class SweepConfig:
    """Baseline vs reduced over ``input_sizes`` x ``batch_sizes``; ``model`` carries the method prefix."""

    model: str = "topk_deit_base_patch16_224"
    keep_ratio: float | None = 0.1
    reduction_loc: list[int] | None = field(default_factory=lambda: [3, 6, 9])
    r: int | None = None
    input_sizes: list[int] = field(default_factory=lambda: [224, 448])
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    warmup: int = 3
    repeats: int = 10
    device: str = "cpu"
    dtype: str = "float32"
    compile: bool = False
    cuda_graph: bool = False
    profile: bool = False  # add torch.profiler columns (a few extra forwards per cell)

    def __post_init__(self) -> None:
        from prismatic_tr.vit import split_method

        method, _ = split_method(self.model)
        if method is None:
            raise ValueError(f"model={self.model!r} needs a method prefix (e.g. topk_deit_base_patch16_224)")
        for name in ("input_sizes", "batch_sizes"):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"{name}={values!r} must be a non-empty list of ints >= 1")
        if self.warmup < 0 or self.repeats < 1:
            raise ValueError(f"warmup={self.warmup!r} must be >= 0 and repeats={self.repeats!r} >= 1")
        self.speed_config(self.input_sizes[0], self.batch_sizes[0])  # validates device, dtype, modes

    @property
    def method(self) -> str:
        from prismatic_tr.vit import split_method

        return str(split_method(self.model)[0])

    @property
    def base_name(self) -> str:
        from prismatic_tr.vit import split_method

        return split_method(self.model)[1]

    @property
    def mode(self) -> str:
        return "cuda_graph" if self.cuda_graph else "compile" if self.compile else "eager"

    def speed_config(self, input_size: int, batch_size: int, reduced: bool = False) -> SpeedConfig:
        """The SpeedConfig of one cell (baseline unless ``reduced``)."""
        red = {"keep_ratio": self.keep_ratio, "reduction_loc": self.reduction_loc, "r": self.r} if reduced else {}
        return SpeedConfig(model=self.model if reduced else self.base_name, input_size=input_size,
                           batch_size=batch_size, device=self.device, dtype=self.dtype, compile=self.compile,
                           cuda_graph=self.cuda_graph, **red)

    def reduction_kwargs(self) -> dict[str, Any]:
        return self.speed_config(1, 1, reduced=True).reduction_kwargs()

    def check_models(self) -> None:
        """:meth:`SpeedConfig.check_model` of the baseline and reduced model at every input size (meta
        parameters): a bad model name or reduction setting fails before any real model is built."""
        for size in self.input_sizes:
            self.speed_config(size, 1).check_model()
            self.speed_config(size, 1, reduced=True).check_model()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a sweep CSV (numbers parsed); [] when the file does not exist."""
    if not path.exists():
        return []
    with path.open() as f:
        reader = csv.DictReader(f)
        rows = [{k: _parse(v) for k, v in row.items()} for row in reader]
        header = tuple(reader.fieldnames or ())
    if rows and not set(SWEEP_COLUMNS[:20]) <= set(header):
        raise ValueError(f"{path} is not a sweep CSV of this version (columns {header[:5]}...); use another out_dir")
    return rows


def _parse(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def _append_row(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SWEEP_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else "" if v is None else v) for k, v in row.items()})


def _key(row: dict[str, Any]) -> tuple:
    return (str(row["model"]), str(row["device"]), str(row["dtype"]), str(row["mode"]), int(row["input_size"]),
            int(row["batch_size"]))


def _models(cfg: SweepConfig, input_size: int) -> tuple[nn.Module, nn.Module]:
    base = build_model(cfg.speed_config(input_size, 1))
    return base, clone_with_reduction(base, cfg.method, **cfg.reduction_kwargs())


def num_locations(model: nn.Module) -> int:
    """Blocks at which the attached reduction acts (at least 1)."""
    from prismatic_tr.vit import get_vit_reduction

    handle = get_vit_reduction(model)
    return max(1, sum(step is not None for step in handle.plan)) if handle is not None else 1


def _static_info(cfg: SweepConfig, input_size: int, base: nn.Module, reduced: nn.Module) -> dict[str, Any]:
    """FLOPs and token count of one input size (batch-independent)."""
    g_base = gmacs_per_image(cfg.speed_config(input_size, 1), base)
    g_red = gmacs_per_image(cfg.speed_config(input_size, 1, reduced=True), reduced)
    x = make_input(cfg.speed_config(input_size, 1))
    with torch.no_grad():
        tokens = int(base.patch_embed(x).shape[1]) + int(getattr(base, "num_prefix_tokens", 1))
    return {"tokens": tokens, "baseline_gmacs": g_base, "reduced_gmacs": g_red, "flop_ratio": g_base / g_red}


def _op_delta(cfg: SweepConfig, input_size: int, batch: int, base: nn.Module, reduced: nn.Module) -> dict[str, Any]:
    """Operators the reduction adds, counted at batch ``batch`` (callers pass 1 or 2: strides, and with them
    copies before a bmm, differ between batch 1 and larger batches, but not among larger ones)."""
    x = make_input(cfg.speed_config(input_size, batch))
    with torch.no_grad():
        delta = reduction_op_delta(base, reduced, x, num_locations=num_locations(reduced))
    return {"ops_added_per_loc": delta.per_location, "ops_added": delta.summary(),
            "host_syncs": sum(delta.host_syncs.values())}


def _time_cell(cfg: SweepConfig, input_size: int, batch: int, base: nn.Module, reduced: nn.Module) -> dict[str, Any]:
    x = make_input(cfg.speed_config(input_size, batch))
    with torch.no_grad():
        fns = {"baseline": forward_fn(base, cfg.speed_config(input_size, batch), x),
               "reduced": forward_fn(reduced, cfg.speed_config(input_size, batch, reduced=True), x)}
        stats = interleaved(fns, warmup=cfg.warmup, repeats=cfg.repeats, device=cfg.device)
    b_ms, r_ms = stats["baseline"].median_ms, stats["reduced"].median_ms
    out: dict[str, Any] = {"baseline_ms": b_ms, "reduced_ms": r_ms, "baseline_tp": batch * 1e3 / b_ms,
                           "reduced_tp": batch * 1e3 / r_ms, "speedup": b_ms / r_ms}
    if cfg.profile:
        for name, fn in fns.items():
            prof = profile_forward(fn, device=cfg.device, repeats=2, warmup=0)
            out.update({f"{name}_ops": prof.dispatched_ops, f"{name}_launches": prof.kernel_launches,
                        f"{name}_device_ms": prof.device_time_ms, f"{name}_wall_ms": prof.wall_time_ms})
    return out


def _cells(cfg: SweepConfig, done: set[tuple]) -> Iterator[tuple[int, int]]:
    for size in cfg.input_sizes:
        for batch in cfg.batch_sizes:
            key = (cfg.model, cfg.device, cfg.dtype, cfg.mode, size, batch)
            if key not in done:
                yield size, batch


def run_sweep(cfg: SweepConfig, csv_path: Path | None = None, progress: bool = True) -> list[dict[str, Any]]:
    """Run every missing cell (resuming from ``csv_path``); returns all rows of this configuration."""
    from tqdm.auto import tqdm

    existing = read_rows(csv_path) if csv_path is not None else []
    if existing and csv_path is not None and tuple(existing[0]) != SWEEP_COLUMNS:
        raise ValueError(f"{csv_path} has other columns than this version writes; resume needs the same version "
                         "(use another out_dir)")
    done = {_key(r) for r in existing}
    todo = list(_cells(cfg, done))
    rows = [r for r in existing if _key(r)[:4] == (cfg.model, cfg.device, cfg.dtype, cfg.mode)]
    current: tuple[int, Any, Any, dict[str, Any]] | None = None
    deltas: dict[tuple[int, int], dict[str, Any]] = {}
    for size, batch in tqdm(todo, desc="sweep", disable=not progress):
        if current is None or current[0] != size:
            base, reduced = _models(cfg, size)
            current = (size, base, reduced, _static_info(cfg, size, base, reduced))
        _, base, reduced, info = current
        key = (size, min(batch, 2))
        if key not in deltas:
            deltas[key] = _op_delta(cfg, size, key[1], base, reduced)
        row = {"model": cfg.model, "method": cfg.method, "device": cfg.device, "dtype": cfg.dtype, "mode": cfg.mode,
               "input_size": size, "batch_size": batch, **info, **deltas[key],
               **_time_cell(cfg, size, batch, base, reduced)}
        row["speedup_over_flop_ratio"] = row["speedup"] / row["flop_ratio"]
        rows.append(row)
        if csv_path is not None:
            _append_row(csv_path, row)
    return sorted(rows, key=lambda r: (int(r["input_size"]), int(r["batch_size"])))


def markdown_tables(rows: list[dict[str, Any]]) -> str:
    """One ``Batch Size | Baseline TP | TR TP | Speedup | Better?`` table per input size (TP in images/s)."""
    out: list[str] = []
    for size in sorted({int(r["input_size"]) for r in rows}):
        sub = sorted((r for r in rows if int(r["input_size"]) == size), key=lambda r: int(r["batch_size"]))
        added: dict[str, list[str]] = {}
        for r in sub:
            added.setdefault(str(r["ops_added"]), []).append(str(r["batch_size"]))
        adds = "; ".join(f"{ops} (batch {', '.join(b)})" for ops, b in added.items())
        extra = f", {sub[0]['tokens']} tokens, GMACs {float(sub[0]['baseline_gmacs']):.2f} -> " \
                f"{float(sub[0]['reduced_gmacs']):.2f}; reduction adds {adds}" if sub else ""
        out += [f"### {size} px{extra}", "", "| Batch Size | Baseline TP | TR TP | Speedup | Better? |",
                "| ---: | ---: | ---: | ---: | :---: |"]
        for r in sub:
            better = "yes" if float(r["speedup"]) > 1.0 else "no"
            out.append(f"| {r['batch_size']} | {float(r['baseline_tp']):.2f} | {float(r['reduced_tp']):.2f} | "
                       f"{float(r['speedup']):.2f}x | {better} |")
        out.append("")
    return "\n".join(out)


def break_even_tokens(rows: list[dict[str, Any]], batch_size: int) -> float | None:
    """Token count where speedup crosses 1 for ``batch_size`` (interpolated in log tokens), or None.

    Returns the first crossing from below (slower) to above; None if the rows never cross.
    """
    pts = sorted((int(r["tokens"]), float(r["speedup"])) for r in rows if int(r["batch_size"]) == batch_size)
    for (t0, s0), (t1, s1) in zip(pts[:-1], pts[1:], strict=True):
        if s0 < 1.0 <= s1 and s1 != s0:
            frac = (1.0 - s0) / (s1 - s0)
            return float(math.exp(math.log(t0) + frac * (math.log(t1) - math.log(t0))))
    return None


def plot_speedup(rows: list[dict[str, Any]], path: Path, title: str | None = None) -> Path:
    """PNG: speedup against token count, one line per batch size, break-even points marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    crossings = 0
    for batch in sorted({int(r["batch_size"]) for r in rows}):
        pts = sorted((int(r["tokens"]), float(r["speedup"])) for r in rows if int(r["batch_size"]) == batch)
        line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"batch {batch}")[0]
        be = break_even_tokens(rows, batch)
        if be is not None:
            crossings += 1
            ax.plot([be], [1.0], marker="*", markersize=14, color=line.get_color())
            ax.annotate(f"{be:.0f}", (be, 1.0), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="break-even (speedup 1)")
    ax.set_xscale("log")
    ax.set_xlabel("tokens entering the backbone (patches + prefix)")
    ax.set_ylabel("speedup (reduced / baseline throughput)")
    note = "" if crossings else " (no break-even in the measured range)"
    ax.set_title((title or "token reduction speedup") + note, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
