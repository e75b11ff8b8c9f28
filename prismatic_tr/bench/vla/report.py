"""Tables, CSV, JSON and a figure for the records of
:func:`prismatic_tr.bench.vla.benchmark.benchmark_token_reduction`."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prismatic_tr.bench.vla.phases import ALL_PHASES, OFT_STEP, step_phases

NOISY_MARK = "NOISY"  # the table's mark for a row with noise_flag set (see prismatic_tr.bench.measure.noise)
NOISE_LABEL = "noisy row (noise_flag)"

# (header, record key, format) of the printed table.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("setting", "setting", "{}"),
    ("cut", "cut", "{}"),
    ("tokens", "num_patches", "{}"),
    ("llm tok", "llm_visual_tokens", "{}"),
    ("e2e ms", "predict_action_ms", "{:.1f}"),
    ("e2e x", "predict_action_speedup", "{:.3f}"),
    ("success", "success_rate", "{:.0%}"),
    ("95% CI", "_success_ci", "{}"),
    ("policy cut", "policy_cut", "{}"),
    ("phases ms", "total_ms", "{:.1f}"),
    ("p10-p90", "_total_spread", "{}"),
    ("vision", "vision_ms", "{:.1f}"),
    ("reducer", "reducer_ms", "{:.2f}"),
    ("proj", "projector_ms", "{:.2f}"),
    ("prefill", "prefill_ms", "{:.1f}"),
    ("decode", "decode_ms", "{:.1f}"),
    ("llm", "llm_ms", "{:.1f}"),
    ("head", "head_ms", "{:.2f}"),
    ("phases x", "speedup", "{:.3f}"),
    ("ideal", "ideal_speedup", "{:.3f}"),
    ("eff", "efficiency", "{:.3f}"),
    ("prefill x", "prefill_speedup", "{:.3f}"),
    ("prefill ideal", "prefill_ideal_speedup", "{:.3f}"),
    ("llm x", "llm_speedup", "{:.3f}"),
    ("llm ideal", "llm_ideal_speedup", "{:.3f}"),
    ("GMACs", "total_gmacs", "{:.1f}"),
    ("agree", "action_token_agreement", "{:.3f}"),
    ("act MAE", "action_mae", "{:.4f}"),
    ("act max", "action_max_abs", "{:.4f}"),
    ("KL tok1", "first_token_kl", "{:.4f}"),
    ("peak MB", "peak_memory_mb", "{:.0f}"),
    ("noise", "noise_flag", "{}"),
)


# Columns of one kind of step only (OpenVLA: prefill, decode; OFT: the one llm pass, head): shown only when a record
# has them, so a table of one kind of model has no empty columns of the other's.
_STEP_ONLY = ("prefill_ms", "decode_ms", "prefill_speedup", "prefill_ideal_speedup", "llm_ms", "head_ms",
              "llm_speedup", "llm_ideal_speedup", "action_max_abs")
# OpenVLA's columns that an OFT table leaves out: the bundled policy is an OpenVLA one (there is no OFT policy yet)
# and OFT's L1 head has no action tokens.
_OPENVLA_ONLY = ("success_rate", "_success_ci", "policy_cut", "action_token_agreement", "first_token_kl")


def _all_oft(records: Sequence[dict[str, Any]]) -> bool:
    return bool(records) and all(step_phases(r) is OFT_STEP for r in records)


def _columns(records: Sequence[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The table's columns for ``records``: every column, less the step-only ones that no record has, and less
    OpenVLA's policy and token columns in a table of OFT rows."""
    drop = {k for k in _STEP_ONLY if not any(k in r for r in records)}
    drop |= set(_OPENVLA_ONLY) if _all_oft(records) else set()
    return [c for c in _COLUMNS if c[1] not in drop]


def _cell(rec: dict[str, Any], key: str, fmt: str) -> str:
    if key == "_total_spread":
        return f"{rec['total_ms_p10']:.1f}-{rec['total_ms_p90']:.1f}"
    if key == "_success_ci":
        low, high = rec.get("success_ci_low"), rec.get("success_ci_high")
        return f"{low:.0%}-{high:.0%}" if low is not None and high is not None else "-"
    if key == "noise_flag":
        return NOISY_MARK if rec.get("noise_flag") else ""
    value = rec.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def format_table(records: Sequence[dict[str, Any]]) -> str:
    """Fixed-width text table, one row per record (latencies are medians in ms)."""
    columns = _columns(records)
    rows = [[h for h, _, _ in columns]] + [[_cell(r, k, f) for _, k, f in columns] for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def _flat(value: Any) -> Any:
    """Shapes (lists) become ``"1x256x2176"`` in CSV cells, mappings (e.g. failed seeds by outcome) JSON."""
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "x".join(str(v) for v in value)
    return "" if value is None else value


def write_csv(records: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """One row per record; columns are the union of record keys in first-seen order."""
    path = Path(path)
    keys = list(dict.fromkeys(k for r in records for k in r))
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for r in records:
            writer.writerow({k: _flat(r.get(k)) for k in keys})
    return path


def write_json(records: Sequence[dict[str, Any]], path: str | Path, meta: dict[str, Any] | None = None) -> Path:
    """``{"meta": {...}, "records": [...]}``, indented."""
    path = Path(path)
    path.write_text(json.dumps({"meta": meta or {}, "records": list(records)}, indent=2, default=str) + "\n")
    return path


def _by_method(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records[1:]:
        groups.setdefault(r["method"], []).append(r)
    return {m: sorted(rs, key=lambda r: r["tokens_kept"]) for m, rs in groups.items()}


def _line_panel(ax: Any, records: Sequence[dict[str, Any]], key: str, ylabel: str, ideal: bool = False) -> None:
    base = records[0]
    for i, (method, rs) in enumerate(_by_method(records).items()):  # distinct markers: lines may coincide
        xs = [r["tokens_kept"] for r in rs] + [1.0]
        ax.plot(xs, [r[key] for r in rs] + [base[key]], marker="os^Dv"[i % 5], markersize=8 - i, alpha=0.85,
                label=method)
    if ideal:
        pts = sorted({(r["tokens_kept"], r["ideal_speedup"]) for r in records if r.get("ideal_speedup") is not None})
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "k--", label="ideal (Amdahl)")
    noisy = [(r["tokens_kept"], r[key]) for r in records if r.get("noise_flag")]
    if noisy:  # a red ring around every point of a flagged row
        ax.plot([p[0] for p in noisy], [p[1] for p in noisy], linestyle="none", marker="o", markersize=14,
                markerfacecolor="none", markeredgecolor="red", markeredgewidth=2, label=NOISE_LABEL)
    ax.set_xlabel("fraction of visual tokens kept")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _bar_label(rec: dict[str, Any]) -> str:
    label = rec.get("setting", rec["method"])
    return f"{label}\n{NOISY_MARK}" if rec.get("noise_flag") else label


def _phase_bars(ax: Any, records: Sequence[dict[str, Any]]) -> None:
    labels = [_bar_label(r) for r in records]
    bottom = [0.0] * len(records)
    for phase in [p for p in ALL_PHASES if all(f"{p}_ms" in r for r in records)]:
        vals = [r[f"{phase}_ms"] for r in records]
        ax.bar(range(len(records)), vals, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(records)))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    for tick, rec in zip(ax.get_xticklabels(), records, strict=True):
        if rec.get("noise_flag"):
            tick.set_color("red")
    ax.set_ylabel("median ms per step")
    ax.legend(fontsize=7)


def build_figure(records: Sequence[dict[str, Any]], title: str = "") -> Any:
    """The matplotlib figure of :func:`plot_results` (caller closes it). Rows with ``noise_flag`` get a red
    ring (legend: ``NOISE_LABEL``) in the line panels and a red ``NOISY`` label under their bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8))
    _line_panel(axes[0], records, "predict_action_speedup", "end-to-end speedup of predict_action (x)", ideal=True)
    if _all_oft(records):  # no action tokens: the largest action change over the chunk instead
        _line_panel(axes[1], records, "action_max_abs", "max |delta action| over the chunk (un-normalised)")
    else:
        _line_panel(axes[1], records, "action_token_agreement", "action-token agreement")
    _line_panel(axes[2], records, "action_mae", "mean |delta action| (un-normalised)")
    axes[0].legend(fontsize=7)
    _phase_bars(axes[3], records)
    noisy = any(r.get("noise_flag") for r in records)
    if noisy:
        title = (title + " | " if title else "") + "NOISY RUN: rows ringed in red are not results (noise_reason)"
    if title:
        fig.suptitle(title, fontsize=10, color="red" if noisy else "black")
    fig.tight_layout()
    return fig


def plot_results(records: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """PNG: end-to-end ``predict_action`` speedup (with the Amdahl bound of the projector site), action-token
    agreement (OFT: the largest action change) and action error against the fraction of visual tokens the LLM keeps, and a stacked bar of the
    phase medians of every setting; noisy rows marked."""
    import matplotlib.pyplot as plt

    fig = build_figure(records, title)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown_table(records: Sequence[dict[str, Any]]) -> str:
    """The main columns as a GitHub markdown table (for a results README)."""
    cols = [c for c in _columns(records)
            if c[1] not in ("prefill_ms", "decode_ms", "llm_ms", "head_ms", "projector_ms", "peak_memory_mb")]
    head = "| " + " | ".join(h for h, _, _ in cols) + " |"
    rule = "| " + " | ".join("---" for _ in cols) + " |"
    body = ["| " + " | ".join(_cell(r, k, f) for _, k, f in cols) + " |" for r in records]
    return "\n".join([head, rule, *body])
