"""The README's quick start runs as written (it must stay self-contained: no checkpoint, no files), and every
number in the README result tables is the one in its results file (prismatic_tr.bench.vla.readme_tables)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from prismatic_tr.bench.vla import readme_tables

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REGENERATE = "python -m prismatic_tr.bench.vla.readme_tables"


def quick_start() -> str:
    text = README.read_text()
    section = text[text.index("## Quick start"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```\n", start)]


def test_quick_start_runs_and_undoes_the_reduction() -> None:
    code = quick_start()
    assert "apply_token_reduction_to_vla" in code and "remove_token_reduction" in code
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # the code asserts the restored model's action itself
    assert namespace["action"].shape == (7,)


def test_readme_tables_are_their_results_files() -> None:
    """Re-render every table from the committed results files: the READMEs must not differ."""
    for path, text in readme_tables.rendered(ROOT).items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)}: a table differs from its files; run {REGENERATE}"


def _table_rows(text: str, name: str) -> list[list[str]]:
    start, end = readme_tables.markers(name)
    block = text[text.index(start) + len(start):text.index(end)]
    rows = [line.strip("|").split(" | ") for line in block.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row] for row in rows[2:]]  # without header and rule


def test_end_to_end_columns_are_predict_action_speedup_not_the_phase_sum() -> None:
    records = json.loads((ROOT / readme_tables.POLICY_RESULTS).read_text())["records"]
    main_rows = _table_rows(README.read_text(), "main")
    policy_rows = _table_rows((ROOT / "benchmarks/results/policy/README.md").read_text(), "policy")
    assert len(main_rows) == len(policy_rows) == len(records)
    for rec, main_row, policy_row in zip(records, main_rows, policy_rows, strict=True):
        e2e = f"{rec['predict_action_speedup']:.2f}x"
        assert main_row[2].startswith(e2e) and policy_row[4].strip("*").startswith(e2e), rec["setting"]
        assert policy_row[5] == f"{rec['speedup']:.2f}x"  # the phase sum, labelled so in its header


def _copy_sources(root: Path) -> None:
    """The READMEs and every results file the tables read, into a scratch repository ``root``."""
    paths = ["README.md", "benchmarks/results/policy/README.md", str(readme_tables.POLICY_RESULTS),
             str(readme_tables.SELECTION_TEST), *map(str, readme_tables.SPEED_BY_DTYPE.values()),
             *map(str, readme_tables.OFT_BY_DTYPE.values()), *map(str, readme_tables.OFT_FROZEN_BY_DTYPE.values()),
             *([str(readme_tables.MAIN_OFT)] if (ROOT / readme_tables.MAIN_OFT).is_file() else []),
             *(str(p.relative_to(ROOT)) for p in (ROOT / readme_tables.ADAPTERS).glob("*/record.json")),
             *(str(f.relative_to(ROOT)) for k in readme_tables.OFT_POLICY for f in readme_tables.oft_policy_files(ROOT, k)),
             *(str(p.relative_to(ROOT)) for p in (ROOT / readme_tables.ADAPTERS).glob("*/token_reduction.json")),
             *(str(p.relative_to(ROOT)) for p in (ROOT / readme_tables.FINETUNE).glob("*/eval_test*.json")),
             *map(str, readme_tables.METAWORLD_POLICIES.values()),
             *(str(p.relative_to(ROOT)) for p in readme_tables.metaworld_table_files(ROOT)),
             *(str(p.relative_to(ROOT)) for p in readme_tables.metaworld_finetune_files(ROOT)),
             *(str(p) for files in readme_tables.GPU_FILES.values() for p in files.values())]
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)


def test_a_changed_number_fails_the_check_until_rerendered(tmp_path: Path, capsys) -> None:
    _copy_sources(tmp_path)
    assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 0
    results = tmp_path / readme_tables.POLICY_RESULTS
    data = json.loads(results.read_text())
    data["records"][1]["predict_action_speedup"] = 9.87
    results.write_text(json.dumps(data))
    assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 1
    assert "README.md: a table differs" in capsys.readouterr().err
    assert readme_tables.main(["--root", str(tmp_path)]) == 0
    assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 0
    assert re.search(r"\| 9\.87x\*? \|", (tmp_path / "README.md").read_text())


def test_an_oft_number_fails_the_check_until_rerendered(tmp_path: Path, capsys) -> None:
    _copy_sources(tmp_path)
    results = tmp_path / readme_tables.OFT_BY_DTYPE["bfloat16"]
    data = json.loads(results.read_text())
    data["records"][1]["predict_action_speedup"] = 7.65
    results.write_text(json.dumps(data))
    assert readme_tables.main(["--check", "--root", str(tmp_path)]) == 1
    assert readme_tables.main(["--root", str(tmp_path)]) == 0
    section = (tmp_path / "README.md").read_text().split("<!-- table:oft start -->")[1]
    assert "| **7.65x" in section.split("<!-- table:oft end -->")[0]


def test_missing_markers_or_files_are_named(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="has no <!-- table:main start --> ... <!-- table:main end --> pair"):
        readme_tables.replace_table("no markers here", "main", "| x |")
    with pytest.raises(SystemExit) as exc:
        readme_tables.main(["--root", str(tmp_path)])
    assert exc.value.code == 2 and "results.json' does not exist" in capsys.readouterr().err


def test_adapter_rows_show_their_settings_speed_and_their_own_success(tmp_path: Path) -> None:
    """An adapter row (as the main job writes it) renders with its setting's end-to-end speed, marked, and the
    adapter's 100 test episodes from its fine-tuning run."""
    _copy_sources(tmp_path)
    results = tmp_path / readme_tables.POLICY_RESULTS
    data = json.loads(results.read_text())
    i, row = next((i, r) for i, r in enumerate(data["records"]) if r["setting"] == "vision:diverse:0.1@0.25")
    adapter = {**row, "setting": f"{row['setting']} with adapter vision-diverse-0.1-0.25",
               "adapter": "vision-diverse-0.1-0.25", "speed_from": row["setting"], "success_rate": 0.5,
               "success_ci_low": 0.4, "success_ci_high": 0.6}
    data["records"].insert(i + 1, adapter)
    results.write_text(json.dumps(data))
    assert readme_tables.main(["--root", str(tmp_path)]) == 0
    rows = _table_rows((tmp_path / "README.md").read_text(), "main")
    cells = rows[i + 1]
    assert cells[0] == "`vision:diverse:0.1@0.25` with its shipped fine-tuned adapter (`vision-diverse-0.1-0.25`)"
    assert cells[2].startswith(f"{row['predict_action_speedup']:.2f}x") and cells[2].endswith(readme_tables.ADAPTER_MARK)
    assert cells[3] == rows[i][3] and cells[4] == "50 % (40-60 %)" and cells[6] == "96 % (90-98 %)"
