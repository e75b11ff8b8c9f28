"""Tables and the success-against-speedup plot of closed-loop (and offline) evaluations."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

SITE_MARKERS = {"none": "*", "projector": "o", "vision": "s", "llm": "^", "projector+llm": "D", "vision+llm": "P"}


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


def _method_of(family: str) -> str:
    """The method a family's colour stands for: ``vision:norm@0.25:compact`` -> ``norm``; combined sites keep
    both (``vision:norm@0.25+llm:attention@0.25`` -> ``norm+llm``); the baseline is ``none``."""
    parts = [p.split("@")[0].split(":") for p in family.replace(":compact", "").split("+")]
    names = [bits[-1] if bits[0] != "llm" or len(parts) == 1 else "llm" for bits in parts]
    return "+".join(names)


def plot_tradeoff(records: Sequence[dict[str, Any]], path: str | Path, title: str = "",
                  x: str = "predict_action_speedup", y: str = "success_rate",
                  x_label: str = "end-to-end speedup of predict_action (x)",
                  y_label: str = "success rate") -> Path:
    """Success (with its interval when present) against end-to-end speedup, one point per setting.

    One colour per method, one marker per site (circle projector, square vision, triangle llm, star the
    unreduced model); settings with ``:compact`` positions are hollow and dashed. Points of one family (site,
    method, depth, positions) are joined in order of speedup and labelled with the fraction kept. The legend
    sits outside the axes; ``x_label`` / ``y_label`` should name the model each axis was measured on.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10.5, 5.8))
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in records:
        groups.setdefault((rec["site"], rec["method"]), []).append(rec)
    methods = sorted({_method_of(family) for _, family in groups} - {"none"})
    palette = plt.get_cmap("tab10" if len(methods) <= 10 else "tab20")
    colors = {m: palette(i % palette.N) for i, m in enumerate(methods)} | {"none": "black"}
    for (site, family), recs in sorted(groups.items(), key=lambda g: (g[0][0] != "none", g[0][1])):
        recs = sorted(recs, key=lambda r: r[x])
        xs, ys = [r[x] for r in recs], [r[y] for r in recs]
        color, compact = colors[_method_of(family)], family.endswith(":compact")
        ax.plot(xs, ys, linestyle="--" if compact else "-", marker=SITE_MARKERS.get(site, "o"), color=color,
                markerfacecolor="none" if compact else color, markersize=12 if site == "none" else 7,
                alpha=0.85, label=family if site != "none" else "unreduced")
        if "success_ci_low" in recs[0] and y == "success_rate":
            # float rounding puts a Wilson bound a hair past the rate at 0 or all successes: clip to >= 0
            low = [max(0.0, r[y] - r["success_ci_low"]) for r in recs]
            high = [max(0.0, r["success_ci_high"] - r[y]) for r in recs]
            ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor=color, alpha=0.35, capsize=3)
        for r in recs if site != "none" else []:
            ax.annotate(f"{r['reduction_ratio']:.2g}", (r[x], r[y]), fontsize=7, xytext=(4, 3),
                        textcoords="offset points", color=color)
    ax.set_xlabel(x_label, fontsize=9)
    ax.set_ylabel(y_label, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              title="site:method@depth (number: fraction kept)", title_fontsize=7)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
