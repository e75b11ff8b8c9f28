"""The README is a front page and the docs a site whose every page is reachable (style habit 20); one version
everywhere; no figure in the README's prose and no drifted figure anywhere (every speed-up a page states is one a
generated table shows). ``bash scripts/docs.sh`` (``mkdocs build --strict``, CI) checks links and references."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from helpers.pointers import pointers

import prismatic_tr
from tools.report import figure
from tools.report import pages as report_pages

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250
FRONT_PAGE_SECTIONS = ("Installation", "Quick start", "Three sites", "Results", "Where to go next", "Citation",
                       "License")
GENERATED = re.compile(r"<!-- table:(\w+) start -->.*?<!-- table:\1 end -->", re.S)
# figures that drifted from their files once (issue 50); none may come back
DRIFTED = ("SPEED_F32", "SPEED_BF16", "`oft-vision-diverse-0.1-0.1`", "6106 ms", "4654 ms", "2.74 / 2.15x",
           "3.46 / 2.48x", "3.46x", "2.57x", "474 of 634", "311 s", "571 s", "2.91x", "(2.91x")


def pyproject_version() -> str:
    """``[project] version`` of pyproject.toml (read by hand: tomllib is Python 3.11+, the package takes 3.10)."""
    found = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found, "pyproject.toml names no version"
    return found.group(1)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def mkdocs_config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def nav_pages(nav: list) -> list[str]:
    out: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += nav_pages(value) if isinstance(value, list) else [value]
    return out


def prose(text: str) -> str:
    """``text`` without its generated tables and code blocks."""
    return re.sub(r"```.*?```", "", GENERATED.sub("", text), flags=re.S)


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    config = mkdocs_config()
    assert config["strict"] is True and config["docs_dir"] == "docs"
    listed = nav_pages(config["nav"])
    on_disk = [p.relative_to(DOCS).as_posix() for p in pages()]
    assert sorted(set(listed)) == sorted(listed), "a page is listed twice in mkdocs.yml's nav"
    assert not set(on_disk) - set(listed), f"pages no one can reach (add them to mkdocs.yml's nav): {set(on_disk) - set(listed)}"
    assert not set(listed) - set(on_disk), f"nav entries without a page: {set(listed) - set(on_disk)}"


def test_every_public_subpackage_has_an_api_reference_page() -> None:
    packages = sorted(p.parent.name for p in (ROOT / "prismatic_tr").glob("*/__init__.py"))
    for name in packages:
        page = DOCS / "reference" / f"{name}.md"
        assert page.is_file() and f"::: prismatic_tr.{name}" in page.read_text(), f"no API reference for {name}"


def test_the_docs_build_is_wired_into_the_project() -> None:
    docs_extra = re.search(r"^docs = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert docs_extra and '"mkdocs-material' in docs_extra.group(1) and '"mkdocstrings[python]' in docs_extra.group(1)
    assert "mkdocs build --strict" in (ROOT / "scripts" / "docs.sh").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci and "scripts/docs.sh" in ci


def test_one_version_everywhere() -> None:
    version = pyproject_version()
    assert prismatic_tr.__version__ == version
    readme = README.read_text()
    assert f"version\n{version}." in readme or f"version {version}" in readme, "the README's pitch names the version"
    assert re.search(rf"version\s*=\s*{{{re.escape(version)}}}", readme), "the README's BibTeX names the version"
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert released and released[0] == version, f"CHANGELOG.md's newest version {released[:1]} is not {version}"


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert [h for h in headings if h in FRONT_PAGE_SECTIONS] == list(FRONT_PAGE_SECTIONS), headings
    assert f"]({figure.FIGURE.as_posix()})" in text and (ROOT / figure.FIGURE).is_file()
    assert "<!-- table:headline start -->" in text
    for target in re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#]+)", text):
        assert (ROOT / target).is_file(), f"README links to {target}, which does not exist"
    for key in ("kim2024openvla", "kim2025openvlaoft", "alvar2025divprune", "bolya2023tome"):
        assert key in text, f"the citation block does not credit {key}"


def test_the_readmes_prose_states_no_figure() -> None:
    """Every result on the front page is in its generated table (or the figure): its prose states none."""
    text = prose(README.read_text())
    figures = re.findall(r"(?<![\w./-])\d[\d.,]*\s?(?:x|%|ms|s|min|minutes|GB|MB)(?![\w/])", text)
    assert not figures, f"figures in the README's prose (put them in a generated table, or drop them): {figures}"


def test_no_drifted_figure_and_every_stated_speedup_is_a_tables() -> None:
    texts = {p: p.read_text() for p in [README, *pages()]}
    generated = "".join(m.group(0) for t in texts.values() for m in GENERATED.finditer(t))
    for path, text in texts.items():
        found = [d for d in DRIFTED if d in text]
        assert not found, f"{path.relative_to(ROOT)} states drifted figures: {found}"
        if path.name == "ARCHITECTURE.md":
            continue
        for speed in re.findall(r"(?<![\w.])(\d+\.\d\dx)", prose(text)):
            assert speed in generated, f"{path.relative_to(ROOT)} states {speed}, which no generated table shows"


def test_every_generated_table_lives_in_exactly_one_page() -> None:
    names = [name for _, name, _ in report_pages.TABLES]
    pages_of = {rel for rel, _, _ in report_pages.TABLES}
    texts = {p: p.read_text() for p in [README, *pages(), *(ROOT / "benchmarks" / "results").glob("*/README.md")]}
    for name in set(names):
        start, _ = report_pages.markers(name)
        holders = [p for p, t in texts.items() if start in t and p.relative_to(ROOT).as_posix() in pages_of]
        assert len(holders) == names.count(name) == 1 or name == "oft", (name, holders)
    for path, text in texts.items():
        for name in re.findall(r"<!-- table:([a-z0-9_]+) start -->", text):
            assert (path.relative_to(ROOT).as_posix(), name) in {(r, n) for r, n, _ in report_pages.TABLES}, (
                f"{path.relative_to(ROOT)} has table:{name} markers that no renderer fills")


TOP_LEVEL = tuple(f"{p.name}/" for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))


@pytest.mark.parametrize("page", [README, *[p for p in sorted(DOCS.rglob("*.md")) if p.name != "ARCHITECTURE.md"]],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_repository_path_a_page_names_exists(page: Path) -> None:
    """Paths into this repository (``benchmarks/results/...``, ``prismatic_tr/...``, ``vla_scripts/...``) and
    relative links: what a page points to is there (mkdocs --strict checks the links between pages too)."""
    words = [w for w in pointers(page.read_text()) if w.startswith(TOP_LEVEL) or w.endswith(".md")]
    missing = [w for w in words if not _exists(w, page)]
    assert words or page != README, "README.md: no pointers found (the parser is broken)"
    assert not missing, f"{page.relative_to(ROOT)} points to what is not there: {missing}"


def _exists(word: str, page: Path) -> bool:
    """A path relative to the page's folder or the repository (globs allowed)."""
    pattern = any(c in word for c in "*?")
    return any((any(r.glob(word)) if pattern else (r / word).exists()) for r in (page.parent, ROOT))


def test_the_usage_guides_example_runs() -> None:
    """docs/guides/usage.md's first example (a tiny random-weight model, no file) runs as written and undoes the
    reduction exactly (it asserts that itself)."""
    text = (DOCS / "guides" / "usage.md").read_text()
    start = text.index("```python\n") + len("```python\n")
    code = text[start:text.index("```\n", start)]
    namespace: dict = {}
    exec(compile(code, "docs/guides/usage.md", "exec"), namespace)
    assert namespace["action"].shape == (7,)
