"""Records say what happened: every file or folder a results README under ``benchmarks/results/`` points to exists,
and every test figure of the fine-tuning table names the checkpoint it is from (the table is the one
``benchmarks/finetune_curves.py`` prints from the committed files)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.pointers import pointers

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
READMES = sorted(RESULTS.glob("*/README.md"))


def exists(word: str, readme: Path) -> bool:
    """Relative to the README's folder, the repository or the package; a bare file name (or glob) anywhere under
    ``benchmarks/results/`` (a run's ``eval_test.json``) or one or two levels under the repository
    (``make_demos.py``: vla_scripts/)."""
    roots = [readme.parent, ROOT, ROOT / "prismatic_tr"]
    if any(any(root.glob(word)) if any(c in word for c in "*?") else (root / word).exists() for root in roots):
        return True
    if "/" not in word:
        return any(RESULTS.rglob(word)) or any(ROOT.glob(f"*/{word}")) or any(ROOT.glob(f"*/*/{word}"))
    return False


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.parent.name)
def test_every_pointer_in_a_results_readme_exists(readme: Path) -> None:
    words = pointers(readme.read_text())
    assert words, f"{readme}: no pointers found (the parser is broken)"
    missing = [w for w in words if not exists(w, readme)]
    assert not missing, f"{readme.relative_to(ROOT)} points to what is not there: {missing}"


def test_pointer_parser_reads_the_forms_used() -> None:
    text = ("see `eval_test.json`, `tests/models/test_models.py::test_x`, `reducers/a.py:gather_rows`, "
            "`python vla_scripts/x.py --output_dir outputs/y --csv benchmarks/results/z.csv`, `<dir>/data`, "
            "[curves](curves.png), `speed_float32/`, `a_word`, `--vla_path .../step_N`")
    assert pointers(text) == sorted(["eval_test.json", "tests/models/test_models.py", "reducers/a.py", "vla_scripts/x.py",
                                     "benchmarks/results/z.csv", "curves.png", "speed_float32/"])


def test_every_fine_tuning_test_figure_names_its_checkpoint() -> None:
    """The README's table is finetune_curves.py's, and each test row says which checkpoint (a step) it measured."""
    from prismatic_tr.policy import finetune_curves

    runs = finetune_curves.read_runs(RESULTS / "finetune_reduced")
    table = finetune_curves.table(runs, RESULTS)
    assert table in (RESULTS / "finetune_reduced" / "README.md").read_text()
    tests = [line for line in table.splitlines() if "| test:" in line]
    assert tests and all(re.search(r"\| test: ([a-z0-9]+, )?step \d+ \|", line) for line in tests), tests
    for run in runs:
        chosen = RESULTS / "finetune_reduced" / run["name"] / "chosen.txt"
        if chosen.is_file():  # the test of the chosen checkpoint is the one chosen.txt names
            step = int(re.search(r"step_(\d+)", chosen.read_text()).group(1))
            assert f"chosen, step {step}" in run["tests"], (run["name"], list(run["tests"]))
