"""Commands are thin (issue 49): every program under ``vla_scripts/`` and ``benchmarks/`` parses, calls the library
and writes results, in at most ~80 lines of code beyond its docstring, comments and config dataclass; the work lives
in ``prismatic_tr``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_CODE_LINES = 80


def code_lines(source: str) -> int:
    """Lines of code: not blank, not a comment, not the module docstring, not a ``@dataclass`` class."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        skipped.update(range(first.lineno, first.end_lineno + 1))
    for node in tree.body:
        decorators = [d.func if isinstance(d, ast.Call) else d for d in getattr(node, "decorator_list", [])]
        if isinstance(node, ast.ClassDef) and any(getattr(d, "id", None) == "dataclass" for d in decorators):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            skipped.update(range(start, node.end_lineno + 1))
    return sum(1 for i, line in enumerate(source.splitlines(), 1)
               if i not in skipped and line.strip() and not line.strip().startswith("#"))


def test_code_lines_skip_docstring_comments_and_config() -> None:
    source = '"""Doc.\n\nMore."""\n\n# a comment\nimport os\n\n\n@dataclass\nclass C:\n    a: int = 1\n\n\nx = 1\n'
    assert code_lines(source) == 2


# tools/report/ is the checkout's report tool (tables and figure from benchmarks/results/): a small library, not a
# command (its __main__.py is), held to the library's module size instead.
REPORT = ROOT / "tools" / "report"
MAX_MODULE_LINES = 400
COMMANDS = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("vla_scripts/*.py"), *ROOT.glob("benchmarks/**/*.py"),
                                                     REPORT / "__main__.py"] if p.name != "__init__.py")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_is_thin(command: str) -> None:
    n = code_lines((ROOT / command).read_text())
    assert n <= MAX_CODE_LINES, f"{command} has {n} lines of code; move its work into prismatic_tr"


def test_every_vla_script_is_a_console_script() -> None:
    """Each program in vla_scripts/ is installed as ``prismatic-tr-<name>`` (lerobot's ``[project.scripts]``)."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    modules = {target.partition(":")[0] for target in scripts.values()}
    missing = sorted(f"vla_scripts.{p.stem}" for p in ROOT.glob("vla_scripts/*.py") if p.name != "__init__.py")
    assert [m for m in missing if m not in modules] == []
    assert all(name == "prismatic-tr-" + scripts[name].partition(":")[0].rpartition(".")[2].replace("_", "-")
               for name in scripts if scripts[name].startswith("vla_scripts."))


@pytest.mark.parametrize("module", sorted(p.name for p in REPORT.glob("*.py")))
def test_report_modules_are_small(module: str) -> None:
    n = len((REPORT / module).read_text().splitlines())
    assert n <= MAX_MODULE_LINES, f"tools/report/{module} has {n} lines; split it"


def test_the_installed_package_never_imports_the_checkouts_tools() -> None:
    """The report reads the checkout's results files: the package (installed without them) must not import it."""
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "prismatic_tr").rglob("*.py")
                 if any(isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                     name.split(".")[0] in ("benchmarks", "tests", "tools") for name in
                     ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]))
                     for node in ast.walk(ast.parse(p.read_text())))]
    assert offenders == []
