"""The serving table: load-test reports (``vla_scripts/load_test.py --output``) as one markdown table.

    python -m prismatic_tr.serve.report benchmarks/results/serve/*.json

One row per report, by model (unreduced first) and clients, soaks last: model, setting, dtype, clients, actions per second (and its ratio to the
unreduced row of the same model, dtype and clients, when there is one), latency p50 / p95 / p99, the server's mean
batch size, and what went wrong (errors, lost, mismatched); a soak report adds its bad requests and memory.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = ("model", "setting", "dtype", "clients", "actions/s", "vs unreduced", "p50 ms", "p95 ms", "p99 ms",
           "mean batch", "errors / lost / mismatched")


def _short_model(name: str | None) -> str:
    text = str(name or "?")
    if text.startswith("preset "):
        return text.split()[1]
    return "bundled policy" if text.startswith("bundled policy") else text


def _row(report: dict[str, Any], baseline: dict[tuple[Any, ...], float]) -> list[str]:
    key = (report.get("model"), report.get("dtype"), report.get("clients"))
    rate = report.get("actions_per_s")
    base = baseline.get(key)
    ratio = f"{rate / base:.2f}x" if rate and base and report.get("setting") != "none" else "-"
    lat = report.get("latency_ms", {})
    wrong = f"{sum(report.get('errors', {}).values())} / {report.get('lost')} / {report.get('mismatched')}"
    return [_short_model(report.get("model")), f"`{report.get('setting')}`", str(report.get("dtype")),
            str(report.get("clients")), f"{rate:.2f}" if rate else "-", ratio, *(str(lat.get(p, "-")) for p in
            ("p50", "p95", "p99")), str(report.get("server_mean_batch_size")), wrong]


def markdown_table(reports: Sequence[dict[str, Any]]) -> str:
    """The table of ``reports`` (load-test report dicts), each soak followed by a line on its bad requests and
    memory."""
    baseline = {(r.get("model"), r.get("dtype"), r.get("clients")): r["actions_per_s"] for r in reports
                if r.get("setting") == "none" and r.get("actions_per_s")}
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    notes = []
    for report in reports:
        lines.append("| " + " | ".join(_row(report, baseline)) + " |")
        if report.get("config", {}).get("bad_every"):
            rss = report.get("server_rss_mb", {})
            notes.append(f"Soak ({_short_model(report.get('model'))}, {report.get('clients')} clients, "
                         f"{report.get('wall_s')} s): {report.get('ok')} answered, {report.get('lost')} lost, "
                         f"{report.get('mismatched')} mismatched; {report.get('bad_answered_4xx')} of "
                         f"{report.get('bad_sent')} bad requests answered 4xx; server memory {rss.get('start')} MB "
                         f"at the start of the load, {rss.get('end')} MB at the end.")
    return "\n".join(lines + ([""] + notes if notes else []))


def in_reading_order(reports: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Load tests by model, unreduced first, then by clients; soaks last (the README's order)."""
    def key(r: dict[str, Any]) -> tuple:
        return (bool(r.get("config", {}).get("bad_every")), _short_model(r.get("model")), r.get("setting") != "none",
                str(r.get("setting")), int(r.get("clients") or 0))

    return sorted(reports, key=key)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prismatic_tr.serve.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path, help="load_test.py --output files")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.reports if not p.is_file()]
    if missing:
        parser.error(f"no such report: {', '.join(missing)}")
    print(markdown_table(in_reading_order([json.loads(p.read_text()) for p in args.reports])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
