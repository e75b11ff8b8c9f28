"""The package's import graph has no circle and points only down (issues 27 item 4, 49): every module can be
imported on its own, and a module imports only modules of its own layer or of a lower one (``LAYERS``). Imports
inside ``if TYPE_CHECKING:`` are annotations, not edges; imports inside functions count (a lazy import that closes a
circle or points up is still one), and so do relative imports (``from .x import y``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files() -> dict[str, Path]:
    """``prismatic_tr.x.y`` -> its file, for every module of the package."""
    out = {}
    for path in (ROOT / "prismatic_tr").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _target(module: str, node: ast.ImportFrom, modules: dict[str, Path]) -> str | None:
    """The absolute module name ``from <node.module>`` names inside ``module`` (relative levels resolved)."""
    if node.level == 0:
        return node.module
    package = module.split(".") if modules[module].name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, modules: dict[str, Path], name: str | None = None) -> set[str]:
    """The package modules ``path`` (the module ``name``) imports anywhere (function bodies and relative imports
    included), less TYPE_CHECKING blocks."""
    name = name or next(m for m, p in modules.items() if p == path)
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (base := _target(name, node, modules)):
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circle() -> None:
    modules = module_files()
    graph = {m: imports_of(p, modules, m) - {m} for m, p in modules.items()}
    assert cycles(graph) == []


# The package's layers, lowest first: a module may import its own layer and the layers before it, never one after.
# ``calls`` (the record of one call), ``cli`` and ``bench.measure`` are the shared tools (per-call record, flag
# parsing, timing, devices) that import nothing of the package;
# then the reduction algorithms, the fidelity metrics and the patches (reducers, eval, vit, llm), the native models,
# which also say which model family a model, checkpoint or run record is (``models.family``), the reduction API over
# any OpenVLA (vla), the data and environments, training, the bundled policies, the server, and on top the benchmarks that time
# and score all of them (and write the README's tables from every result, the server's load tests included). A
# module's layer is its longest prefix in this list.
LAYERS = ("calls", "cli", "bench.measure", "reducers", "eval", "vit", "llm", "models", "vla", "data", "envs", "training",
          "policy", "serve", "bench.vit", "bench.vla", "bench", "")


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of ``prismatic_tr.<module>``'s layer (its longest listed prefix)."""
    rest = module.removeprefix("prismatic_tr").removeprefix(".")
    hits = [i for i, name in enumerate(LAYERS) if rest == name or rest.startswith(name + ".") or not name]
    return max(hits, key=lambda i: len(LAYERS[i]))


def test_layer_of_takes_the_longest_prefix() -> None:
    assert LAYERS[layer_of("prismatic_tr.bench.measure.timing")] == "bench.measure"
    assert LAYERS[layer_of("prismatic_tr.bench.vla.job")] == "bench.vla"
    assert LAYERS[layer_of("prismatic_tr.vla.sites.llm")] == "vla"
    assert LAYERS[layer_of("prismatic_tr")] == ""


def test_every_module_has_a_listed_layer() -> None:
    unlisted = sorted(m for m in module_files() if LAYERS[layer_of(m)] == "" and m != "prismatic_tr")
    assert unlisted == [], "add these sub-packages to LAYERS"


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    pkg = tmp_path / "prismatic_tr" / "a"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def g():\n    from ..c import h\n    from . import d\n")
    modules = {"prismatic_tr.a": pkg / "__init__.py", "prismatic_tr.a.b": pkg / "b.py",
               "prismatic_tr.c": tmp_path / "prismatic_tr" / "c.py", "prismatic_tr.a.d": pkg / "d.py"}
    assert imports_of(pkg / "__init__.py", modules, "prismatic_tr.a") == {"prismatic_tr.a.b"}
    assert imports_of(pkg / "b.py", modules, "prismatic_tr.a.b") == {"prismatic_tr.c", "prismatic_tr.a.d"}


def test_no_module_imports_a_higher_layer() -> None:
    modules = module_files()
    upward = sorted(f"{m} -> {t}" for m, p in modules.items() for t in imports_of(p, modules, m)
                    if layer_of(t) > layer_of(m))
    assert upward == []
