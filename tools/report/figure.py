"""The README's picture: success against end-to-end speed-up of every setting of the main job, drawn from
``benchmarks/results/policy/results.json`` with the plotted numbers embedded in the PNG (a ``tEXt`` chunk), so a
test can check the picture against its results file without comparing pixels across matplotlib versions.

    python -m tools.report            # writes docs/assets/tradeoff.png with the tables

One point per row: x the whole ``predict_action``'s speed-up on ``cpu-bench`` (random weights), y the bundled
policy's success on the main job's test episodes with its Wilson interval; one marker per site, an adapter's point
joined to its training-free setting's. A row its run flagged noisy is drawn hollow and grey and labelled so: its
speed is no result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIGURE = Path("docs/assets/tradeoff.png")
DATA_KEY = "prismatic_tr:data"  # the PNG text chunk holding the plotted numbers
SITE_MARKERS = {"none": "*", "projector": "o", "vision": "s", "llm": "^"}


def figure_data(main: dict[str, Any]) -> dict[str, Any]:
    """The numbers the picture shows, from the main job's ``results.json`` (``{"meta", "records"}``), rounded as
    plotted."""
    meta, records = main["meta"], main["records"]
    points = []
    for rec in records:
        if rec.get("success_rate") is None:
            continue
        site = rec["site"].split("+")[0] if rec["site"] != "none" else "none"
        points.append({"setting": rec["setting"], "site": site, "adapter": rec.get("adapter"),
                       "speed_from": rec.get("speed_from"), "noisy": bool(rec.get("noise_flag")),
                       "speedup": round(rec["predict_action_speedup"], 3), "success": round(rec["success_rate"], 3),
                       "low": round(rec["success_ci_low"], 3), "high": round(rec["success_ci_high"], 3)})
    episodes = next((r["policy_episodes"] for r in records if r.get("policy_episodes")), None)
    return {"source": "benchmarks/results/policy/results.json", "command": meta.get("command"),
            "date_utc": meta.get("date_utc"), "dtype": meta.get("dtype"), "episodes": episodes,
            "cpu": (meta.get("machine", {}).get("cpu") or {}).get("model"), "points": points}


def _label(point: dict[str, Any]) -> str:
    if point["adapter"]:
        return f"+ adapter {point['adapter']}"
    text = "unreduced" if point["site"] == "none" else point["setting"]
    return text + (" (speed noisy)" if point["noisy"] else "")


def draw(data: dict[str, Any], path: Path) -> Path:
    """Draw ``data`` (:func:`figure_data`) into ``path`` with the data embedded; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"none": "black", "projector": "tab:blue", "vision": "tab:orange", "llm": "tab:green"}
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    by_setting = {p["setting"]: p for p in data["points"]}
    placed: list[tuple[float, float, float]] = []  # labels placed so far: x, y, width (data coordinates)
    for p in data["points"]:
        color = "grey" if p["noisy"] else colors.get(p["site"], "tab:red")
        marker = "P" if p["adapter"] else SITE_MARKERS.get(p["site"], "o")
        ax.errorbar([p["speedup"]], [100 * p["success"]],
                    yerr=[[100 * max(0.0, p["success"] - p["low"])], [100 * max(0.0, p["high"] - p["success"])]],
                    fmt=marker, color=color, markerfacecolor="none" if p["noisy"] else color, markersize=9,
                    capsize=3, alpha=0.9)
        x, y, width = p["speedup"] + 0.012, 100 * p["success"] - 1.5, 0.0048 * len(_label(p))
        while any(qx < x + width and x < qx + qw and abs(qy - y) < 4.0 for qx, qy, qw in placed):
            y -= 4.0  # below the labels already placed across it
        placed.append((x, y, width))
        moved = abs(y - (100 * p["success"] - 1.5)) > 1e-9
        ax.annotate(_label(p), (p["speedup"], 100 * p["success"]), xytext=(x, y), fontsize=7, color=color,
                    arrowprops={"arrowstyle": "-", "color": color, "alpha": 0.4, "lw": 0.6} if moved else None)
        base = by_setting.get(p["speed_from"] or "")
        if p["adapter"] and base:
            ax.annotate("", (p["speedup"], 100 * p["success"]), (base["speedup"], 100 * base["success"]),
                        arrowprops={"arrowstyle": "->", "color": color, "alpha": 0.6})
    ax.set_xlabel(f"end-to-end speed-up of predict_action, cpu-bench (random weights), {data['dtype']}, "
                  f"{data['cpu']}", fontsize=8)
    ax.set_ylabel(f"success, bundled policy, {data['episodes']} test episodes (%)", fontsize=8)
    ax.set_title("What each setting buys and costs (main job, " + str(data["date_utc"])[:10] + ")", fontsize=9)
    ax.grid(alpha=0.3)
    ax.set_ylim(top=105)
    ax.margins(x=0.25)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None, DATA_KEY: json.dumps(data, sort_keys=True)})
    plt.close(fig)
    return path


def embedded_data(path: Path) -> dict[str, Any] | None:
    """The data embedded in a picture :func:`draw` wrote; None when the file or its chunk is missing."""
    if not Path(path).is_file():
        return None
    from PIL import Image

    with Image.open(path) as image:
        text = getattr(image, "text", {}).get(DATA_KEY)
    return json.loads(text) if text else None
