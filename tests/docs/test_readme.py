"""The README's quick start runs as written (on the bundled policy and a shipped adapter: nothing to download), and
every number in a generated table (the README's headline, the docs' results pages, the results READMEs) and in the
README's figure is the one in its results file (tools.report)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from prismatic_tr.vla.settings import DEFAULT_METHODS
from tools.report import cells as report_cells
from tools.report import figure, pages, sources, tabletop

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULTS_PAGES = ROOT / "docs" / "results"
REGENERATE = "python -m tools.report"


def quick_start() -> str:
    text = README.read_text()
    section = text[text.index("## Quick start"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```\n", start)]


def test_quick_start_runs_and_undoes_the_reduction() -> None:
    code = quick_start()
    assert "apply_token_reduction_spec" in code and "remove_token_reduction" in code and "load_adapted_policy" in code
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # the code asserts the restored model's action itself
    assert namespace["action"].shape == (7,) and len(namespace["outcomes"]) == 2


def test_tables_and_figure_are_their_results_files() -> None:
    """Re-render every table and the figure's data from the committed results files: nothing may differ."""
    for path, text in pages.rendered(ROOT).items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)}: a table differs from its files; run {REGENERATE}"
    assert pages.figure_is_current(ROOT), f"{figure.FIGURE}: its data differs; run {REGENERATE}"
    assert pages.main(["--check"]) == 0


def _table_rows(text: str, name: str) -> list[list[str]]:
    start, end = pages.markers(name)
    block = text[text.index(start) + len(start):text.index(end)]
    rows = [line.strip("|").split(" | ") for line in block.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row] for row in rows[2:]]  # without header and rule


def test_end_to_end_columns_are_predict_action_speedup_not_the_phase_sum() -> None:
    records = json.loads((ROOT / sources.POLICY_RESULTS).read_text())["records"]
    main_rows = _table_rows((RESULTS_PAGES / "openvla.md").read_text(), "main")
    policy_rows = _table_rows((ROOT / "benchmarks/results/policy/README.md").read_text(), "policy")
    assert len(main_rows) == len(policy_rows) == len(records)
    for rec, main_row, policy_row in zip(records, main_rows, policy_rows, strict=True):
        e2e = f"{rec['predict_action_speedup']:.2f}x"
        assert main_row[2].startswith(e2e) and policy_row[4].strip("*").startswith(e2e), rec["setting"]
        assert policy_row[5] == f"{rec['speedup']:.2f}x"  # the phase sum, labelled so in its header


def _copy_sources(root: Path) -> None:
    """Every page with a table, the figure and every results file the tables read, into a scratch repository
    ``root``."""
    paths = [*{rel for rel, _, _ in pages.TABLES}, str(figure.FIGURE),
             *(str(p.relative_to(ROOT)) for p in sources.source_files(ROOT))]
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)


def test_a_changed_number_fails_the_check_until_rerendered(tmp_path: Path, capsys) -> None:
    _copy_sources(tmp_path)
    assert pages.main(["--check", "--root", str(tmp_path)]) == 0
    results = tmp_path / sources.POLICY_RESULTS
    data = json.loads(results.read_text())
    data["records"][1]["predict_action_speedup"] = 9.87
    results.write_text(json.dumps(data))
    assert pages.main(["--check", "--root", str(tmp_path)]) == 1
    assert "openvla.md: a table differs" in capsys.readouterr().err
    assert pages.main(["--root", str(tmp_path)]) == 0
    assert pages.main(["--check", "--root", str(tmp_path)]) == 0
    assert re.search(r"\| 9\.87x\*? \|", (tmp_path / "docs/results/openvla.md").read_text())


def test_an_oft_number_fails_the_check_until_rerendered(tmp_path: Path, capsys) -> None:
    _copy_sources(tmp_path)
    results = tmp_path / sources.OFT_BY_DTYPE["bfloat16"]
    data = json.loads(results.read_text())
    data["records"][1]["predict_action_speedup"] = 7.65
    results.write_text(json.dumps(data))
    assert pages.main(["--check", "--root", str(tmp_path)]) == 1
    assert pages.main(["--root", str(tmp_path)]) == 0
    section = (tmp_path / "docs/results/openvla-oft.md").read_text().split("<!-- table:oft start -->")[1]
    assert "| **7.65x" in section.split("<!-- table:oft end -->")[0]


def test_missing_markers_or_files_are_named(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="has no <!-- table:main start --> ... <!-- table:main end --> pair"):
        pages.replace_table("no markers here", "main", "| x |")
    with pytest.raises(SystemExit) as exc:
        pages.main(["--root", str(tmp_path)])
    assert exc.value.code == 2 and "results.json' does not exist" in capsys.readouterr().err


def test_adapter_rows_show_their_settings_speed_and_their_own_success(tmp_path: Path) -> None:
    """An adapter row (as the main job writes it) renders with its setting's end-to-end speed, marked, and the
    adapter's 100 test episodes from its fine-tuning run."""
    _copy_sources(tmp_path)
    results = tmp_path / sources.POLICY_RESULTS
    data = json.loads(results.read_text())
    setting, name = f"vision:{DEFAULT_METHODS['vision']}:0.1@0.25", f"vision-{DEFAULT_METHODS['vision']}-0.1-0.25"
    i, row = next((i, r) for i, r in enumerate(data["records"]) if r["setting"] == setting)
    adapter = {**row, "setting": f"{row['setting']} with adapter {name}",
               "adapter": name, "speed_from": row["setting"], "success_rate": 0.5,
               "success_ci_low": 0.4, "success_ci_high": 0.6}
    data["records"].insert(i + 1, adapter)
    results.write_text(json.dumps(data))
    assert pages.main(["--root", str(tmp_path)]) == 0
    rows = _table_rows((tmp_path / "docs/results/openvla.md").read_text(), "main")
    cells = rows[i + 1]
    assert cells[0] == f"`{setting}` with its shipped fine-tuned adapter (`{name}`)"
    assert cells[2].startswith(f"{row['predict_action_speedup']:.2f}x") and cells[2].endswith(report_cells.ADAPTER_MARK)
    assert cells[3] == rows[i][3] and cells[4] == "50 % (40-60 %)" and cells[6] == "97 % (92-99 %)"


def test_a_noisy_figure_is_never_a_headline(tmp_path: Path) -> None:
    """The headline table shows ``noisy`` where the run flagged a row, never its number; flagging one more row
    changes the README until it is rendered again."""
    records = {r["setting"]: r for r in json.loads((ROOT / sources.POLICY_RESULTS).read_text())["records"]}
    oft = {r["setting"]: r for r in json.loads((ROOT / sources.OFT_BY_DTYPE["bfloat16"]).read_text())["records"]}
    rows = _table_rows(README.read_text(), "headline")
    assert len(rows) == len(tabletop.HEADLINE_ROWS)
    for (_, a, b), row in zip(tabletop.HEADLINE_ROWS, rows, strict=True):
        for key, cell, recs in ((a, row[1], records), (b, row[3], oft)):
            rec = recs.get((key or "").partition(" with ")[0])
            if rec is not None:
                shown = report_cells.NOISY if rec.get("noise_flag") else f"{rec['predict_action_speedup']:.2f}x" + (
                    report_cells.SLOWER if round(rec["predict_action_speedup"], 2) < 1 else "")
                assert cell.removesuffix(report_cells.ADAPTER_MARK) == shown, (key, cell)
    _copy_sources(tmp_path)
    path = tmp_path / sources.OFT_BY_DTYPE["bfloat16"]
    data = json.loads(path.read_text())
    rec = next(r for r in data["records"] if r["setting"] == f"vision:{DEFAULT_METHODS['vision']}:0.1@0.25")
    rec["noise_flag"] = True
    path.write_text(json.dumps(data))
    assert pages.main(["--check", "--root", str(tmp_path)]) == 1
    assert pages.main(["--root", str(tmp_path)]) == 0
    row = _table_rows((tmp_path / "README.md").read_text(), "headline")[5]
    assert row[0] == "`vision` keep 0.1 after 1/4 of the towers" and row[3] == report_cells.NOISY
    assert f"{rec['predict_action_speedup']:.2f}x" not in row[3]


def test_the_figure_holds_its_results_files_numbers(tmp_path: Path, capsys) -> None:
    """The picture's embedded data is the main job's; a changed success fails the check until it is redrawn."""
    data = figure.embedded_data(ROOT / figure.FIGURE)
    records = json.loads((ROOT / sources.POLICY_RESULTS).read_text())["records"]
    assert data is not None and [p["setting"] for p in data["points"]] == [r["setting"] for r in records]
    _copy_sources(tmp_path)
    path = tmp_path / sources.POLICY_RESULTS
    main = json.loads(path.read_text())
    main["records"][0]["success_rate"] = 0.5
    path.write_text(json.dumps(main))
    assert pages.main(["--check", "--root", str(tmp_path)]) == 1
    assert "tradeoff.png: the figure's data differs" in capsys.readouterr().err
    assert pages.main(["--root", str(tmp_path)]) == 0
    assert figure.embedded_data(tmp_path / figure.FIGURE)["points"][0]["success"] == 0.5
    assert pages.main(["--check", "--root", str(tmp_path)]) == 0


def test_a_setting_slower_than_unreduced_says_so_in_every_speed_cell() -> None:
    """Issue 48: a speed-up under 1 is never shown as a bare number (README, results pages, MetaWorld table)."""
    assert report_cells.speedup(0.83) == "0.83x (slower)" and report_cells.speedup(1.0) == "1.00x"
    assert report_cells.speedup(0.996) == "1.00x" and report_cells.speedup(1.42) == "1.42x"
    assert report_cells.end_to_end({"predict_action_speedup": 0.9, "noise_flag": True}) == "0.90x (slower)*"
    assert report_cells.headline_speed({"predict_action_speedup": 0.99}) == "0.99x (slower)"
    by = {"float32": {"s": {"predict_action_speedup": 1.2}}, "bfloat16": {"s": {"predict_action_speedup": 0.8}}}
    assert report_cells.dtype_speeds({"setting": "s"}, by) == "1.20 / 0.80x (slower in bfloat16)"


def test_the_metaworld_rows_pair_each_setting_with_the_default_and_its_shipped_adapter() -> None:
    """The README's MetaWorld table: each row's `diverse_merge` and `diverse` cells are their test runs' pooled
    successes, their speed the shipped policy's timed run's; a shipped adapter's row follows its setting's row with
    that setting's speed, marked, and no `diverse` cells (the fine-tunes that were not shipped have no row); a
    `diverse_merge_keys` row follows its `vision:diverse_merge` setting's with its own test and timing."""
    from tools.report.metaworld import METAWORLD_HEADLINE_ROWS, METAWORLD_HEADLINE_VARIANTS

    rows = _table_rows(README.read_text(), "metaworld_headline")
    src = sources.Sources.read(ROOT)
    tested = {r["setting"]: r for run in src.metaworld_tables["the shipped policy"] for r in run["records"]}
    speeds = {r["setting"]: r["predict_action_speedup"]  # a setting timed in two runs: the first run's
              for run in reversed(src.metaworld_speed) for r in run["records"]}
    labels = [row[0] for row in rows]
    assert [label for label in labels if not label.startswith("...")] == [r[0] for r in METAWORLD_HEADLINE_ROWS]
    for label, merge, default in METAWORLD_HEADLINE_ROWS:
        row = rows[labels.index(label)]
        for setting, (success, speed) in ((merge, (row[1], row[3])), (default, (row[4], row[6]))):
            rec = tested[setting]
            assert success.startswith(f"{100 * rec['successes'] / rec['episodes']:.1f} %"), setting
            assert speed.startswith(f"{speeds[setting]:.2f}x"), setting
    variants = [(i, row) for i, row in enumerate(rows)
                if row[0].startswith(("... with its cover on the next", "... with its groups grown"))]
    assert [row[0].split("`")[1] for _, row in variants] == [
        "pair_merge", "pair_merge", "diverse_merge_keys", "diverse_merge_keys", "diverse_merge_keys"]
    for i, row in variants:  # after its setting's row: the variant at the same keep, its own test and timing
        setting = next(row[0] for row in reversed(rows[:i]) if not row[0].startswith("..."))  # after its adapter's
        merge = next(m for label, m, _ in METAWORLD_HEADLINE_ROWS if label == setting)
        variant = next(v for v, label in METAWORLD_HEADLINE_VARIANTS[merge] if label == row[0])
        rec = tested[variant]
        assert row[1].startswith(f"{100 * rec['successes'] / rec['episodes']:.1f} %") and row[4:] == ["-", "-", "-"]
        assert row[3].startswith(f"{speeds[variant]:.2f}x")
    adapters = [(i, row) for i, row in enumerate(rows) if row[0].startswith("... with its shipped adapter")]
    assert len(adapters) == 2
    for i, row in adapters:
        assert row[3] == rows[i - 1][3] + report_cells.ADAPTER_MARK
        assert row[4:] == ["-", "-", "-"] and f"`{row[0].split('`')[1]}`" in row[0]
