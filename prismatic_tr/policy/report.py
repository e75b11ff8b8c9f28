"""Tables and the success-against-speedup plot of closed-loop (and offline) evaluations."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

SITE_COLORS = {"none": "black", "projector": "tab:blue", "vision": "tab:green", "llm": "tab:orange",
               "projector+llm": "tab:purple", "vision+llm": "tab:red"}


def format_rows(records: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """A fixed-width text table: ``columns`` are (header, key, format); missing / None cells print '-'."""
    cells = [[h for h, _, _ in columns]]
    for rec in records:
        cells.append([fmt.format(rec[k]) if rec.get(k) is not None else "-" for _, k, fmt in columns])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells)


CLOSED_LOOP_COLUMNS = (
    ("setting", "setting", "{}"), ("tokens", "num_patches", "{}"), ("llm tokens", "llm_visual_tokens", "{}"),
    ("success", "success_rate", "{:.1%}"), ("95% CI low", "success_ci_low", "{:.1%}"),
    ("high", "success_ci_high", "{:.1%}"), ("episodes", "episodes", "{}"), ("steps", "mean_steps", "{:.1f}"),
    ("predict_action ms", "predict_action_ms", "{:.1f}"), ("speedup", "predict_action_speedup", "{:.2f}"),
)


def best_within(records: Sequence[dict[str, Any]], max_loss: float = 0.02,
                x: str = "predict_action_speedup") -> dict[str, dict[str, Any]]:
    """Per site, the setting with the largest ``x`` whose success rate is at most ``max_loss`` (a fraction:
    0.02 = 2 percentage points) below the unreduced row's; sites with no such setting are left out.

    Point estimates: with a few hundred episodes the intervals are wider than 2 points, so read the chosen rows
    with their ``success_ci_low`` / ``success_ci_high``."""
    base = next((r for r in records if r["site"] == "none"), None)
    if base is None or base.get("success_rate") is None:
        return {}
    floor = base["success_rate"] - max_loss - 1e-12
    best: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec["site"] == "none" or rec.get("success_rate") is None or rec["success_rate"] < floor:
            continue
        if rec["site"] not in best or rec[x] > best[rec["site"]][x]:
            best[rec["site"]] = rec
    return best


def plot_tradeoff(records: Sequence[dict[str, Any]], path: str | Path, title: str = "",
                  x: str = "predict_action_speedup", y: str = "success_rate") -> Path:
    """Success (with its interval when present) against end-to-end speedup, one point per setting, coloured
    by site; points of one site and method joined in order of speedup."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in records:
        groups.setdefault((rec["site"], rec["method"]), []).append(rec)
    for (site, family), recs in groups.items():
        recs = sorted(recs, key=lambda r: r[x])
        xs, ys = [r[x] for r in recs], [r[y] for r in recs]
        color = SITE_COLORS.get(site, "gray")
        ax.plot(xs, ys, "o-", color=color, alpha=0.8, label=family)
        if "success_ci_low" in recs[0] and y == "success_rate":
            # float rounding puts a Wilson bound a hair past the rate at 0 or all successes: clip to >= 0
            low = [max(0.0, r[y] - r["success_ci_low"]) for r in recs]
            high = [max(0.0, r["success_ci_high"] - r[y]) for r in recs]
            ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor=color, alpha=0.4, capsize=3)
        for r in recs:
            ax.annotate(f"{r['reduction_ratio']:.2g}", (r[x], r[y]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xlabel("end-to-end speedup of predict_action (x)")
    ax.set_ylabel("success rate" if y == "success_rate" else y)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
