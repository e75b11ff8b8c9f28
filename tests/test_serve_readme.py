"""The README's serving table is the load tester's committed reports, rendered (style habit 17)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prismatic_tr.serve.report import in_reading_order, markdown_table

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "benchmarks" / "results" / "serve"


def readme_block(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- table:{name} start -->\n(.*?)\n<!-- table:{name} end -->", text, re.S)
    assert found, f"README.md has no table:{name} markers"
    return found.group(1)


def test_serve_table_is_the_reports_rendered() -> None:
    reports = [json.loads(p.read_text()) for p in sorted(REPORTS.glob("*.json"))]
    assert reports, f"no load-test reports in {REPORTS}"
    assert readme_block("serve") == markdown_table(in_reading_order(reports))


def test_a_changed_number_is_caught() -> None:
    reports = [json.loads(p.read_text()) for p in sorted(REPORTS.glob("*.json"))]
    reports[0] = {**reports[0], "actions_per_s": reports[0]["actions_per_s"] * 2}
    assert readme_block("serve") != markdown_table(in_reading_order(reports))
