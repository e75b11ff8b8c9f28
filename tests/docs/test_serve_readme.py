"""The docs' serving table is the load tester's committed reports, rendered (style habit 17)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prismatic_tr.serve.report import in_reading_order, markdown_table

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "benchmarks" / "results" / "serve"
SERVE_PAGE = "docs/results/serving.md"  # the page the serving table lives in (tools.report)


def readme_block(name: str) -> str:
    text = (ROOT / SERVE_PAGE).read_text()
    found = re.search(rf"<!-- table:{name} start -->\n(.*?)\n<!-- table:{name} end -->", text, re.S)
    assert found, f"{SERVE_PAGE} has no table:{name} markers"
    return found.group(1)


def test_serve_table_is_the_reports_rendered() -> None:
    reports = [json.loads(p.read_text()) for p in sorted(REPORTS.glob("*.json"))]
    assert reports, f"no load-test reports in {REPORTS}"
    assert readme_block("serve") == markdown_table(in_reading_order(reports))


def test_a_changed_number_is_caught() -> None:
    reports = [json.loads(p.read_text()) for p in sorted(REPORTS.glob("*.json"))]
    reports[0] = {**reports[0], "actions_per_s": reports[0]["actions_per_s"] * 2}
    assert readme_block("serve") != markdown_table(in_reading_order(reports))


def _report(setting: str, rate: float, soak: bool = False) -> dict:
    return {"model": "preset tiny (random weights, seed 0)", "setting": setting, "dtype": "float32", "clients": 16,
            "actions_per_s": rate, "config": {"bad_every": 50 if soak else 0}}


def test_a_rows_ratio_divides_by_its_own_sweeps_baseline() -> None:
    """A soak of the unreduced model (same model, dtype and clients) is another run: it must not become the sweep's
    baseline, and a reduced soak compares with the unreduced soak."""
    reports = in_reading_order([_report("none", 10.0), _report("vision:diverse:0.1@0.25", 15.0),
                                _report("none", 12.0, soak=True), _report("vision:diverse:0.1@0.25", 18.0, soak=True)])
    ratios = [line.split(" | ")[5] for line in markdown_table(reports).splitlines()[2:6]]
    assert ratios == ["-", "1.50x", "-", "1.50x"]
