"""The serving table: load-test reports (``vla_scripts/load_test.py --output``) as one markdown table.

    python -m prismatic_tr.serve.report benchmarks/results/serve/*.json

One row per report, by model (unreduced first) and clients, soaks last: model, setting, dtype, clients, actions per
second (and its ratio to the unreduced row of the same model, dtype and clients in the same run, sweep or soak, when
there is one), latency p50 / p95 / p99, the server's mean batch size, and what went wrong (errors, lost,
mismatched: "n/a" where every observation had the same reference action, so a mix-up could not be seen); a soak
report adds its bad requests and memory.
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


def is_soak(report: dict[str, Any]) -> bool:
    """Whether ``report`` is a soak (``load_test.py --soak``: bad requests mixed in), a run of its own."""
    return bool(report.get("config", {}).get("bad_every"))


def sweep_key(report: dict[str, Any]) -> tuple[Any, ...]:
    """The run a report's speed compares within: model, dtype, clients, and sweep or soak. A reduced row's ratio
    divides by the unreduced row of its own run only (a soak of the unreduced model is another run)."""
    return report.get("model"), report.get("dtype"), report.get("clients"), is_soak(report)


def mixup_detectable(report: dict[str, Any]) -> bool:
    """Whether the load test could catch a mixed-up answer: at least two observations with differing reference
    actions (``mixup_detectable``; a report written before that field: two distinct reference actions)."""
    if "mixup_detectable" in report:
        return bool(report["mixup_detectable"])
    return (report.get("distinct_reference_actions") or 0) >= 2


def _mismatched(report: dict[str, Any]) -> str:
    """The mismatched count, or "n/a" where every observation had the same reference (nothing to tell apart)."""
    return str(report.get("mismatched")) if mixup_detectable(report) else "n/a"


def _row(report: dict[str, Any], baseline: dict[tuple[Any, ...], float]) -> list[str]:
    rate = report.get("actions_per_s")
    base = baseline.get(sweep_key(report))
    ratio = f"{rate / base:.2f}x" if rate and base and report.get("setting") != "none" else "-"
    lat = report.get("latency_ms", {})
    wrong = f"{sum(report.get('errors', {}).values())} / {report.get('lost')} / {_mismatched(report)}"
    soak = " (soak)" if is_soak(report) else ""  # the same model and clients, another run
    return [_short_model(report.get("model")) + soak, f"`{report.get('setting')}`", str(report.get("dtype")),
            str(report.get("clients")), f"{rate:.2f}" if rate else "-", ratio, *(str(lat.get(p, "-")) for p in
            ("p50", "p95", "p99")), str(report.get("server_mean_batch_size")), wrong]


def markdown_table(reports: Sequence[dict[str, Any]]) -> str:
    """The table of ``reports`` (load-test report dicts), each soak followed by a line on its bad requests and
    memory."""
    baseline = {sweep_key(r): r["actions_per_s"] for r in reports if r.get("setting") == "none" and r.get("actions_per_s")}
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    notes = []
    if not all(mixup_detectable(r) for r in reports):
        notes.append("mismatched n/a: the model gave every observation the same action (random weights), so an "
                     "answer meant for another request could not be told from the right one.")
    for report in reports:
        lines.append("| " + " | ".join(_row(report, baseline)) + " |")
        if is_soak(report):
            rss = report.get("server_rss_mb", {})
            notes.append(f"Soak ({_short_model(report.get('model'))}, {report.get('clients')} clients, "
                         f"{report.get('wall_s')} s): {report.get('ok')} answered, {report.get('lost')} lost, "
                         f"{_mismatched(report)} mismatched; {report.get('bad_answered_4xx')} of "
                         f"{report.get('bad_sent')} bad requests answered 4xx; server memory {rss.get('start')} MB "
                         f"at the start of the load, {rss.get('end')} MB at the end.")
    return "\n".join(lines + ([""] + notes if notes else []))


def in_reading_order(reports: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Load tests by model, unreduced first, then by clients; soaks last (the docs' order)."""
    def key(r: dict[str, Any]) -> tuple:
        return (is_soak(r), _short_model(r.get("model")), r.get("setting") != "none",
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
