"""The result tables of the README and the docs pages, written from the committed results files (one place for
each number).

Sources, all under ``benchmarks/results/``: ``policy/results.json`` (the main job: end-to-end speed, success on
test and validation episodes, adapter rows), ``selection/eval_test.json`` (100 test episodes per setting),
``finetune_reduced/<adapter run>/eval_test.json`` (100 test episodes per shipped adapter) and
``finetune_reduced/speed_{float32,bfloat16}/results.json`` (the same settings timed in both dtypes on one machine),
``oft/{float32,bfloat16}/results.json`` (OpenVLA-OFT's rows on ``cpu-bench-oft`` in both dtypes),
``oft_frozen/{float32,bfloat16}/results.json`` (the same rows with every block compiled and frozen, ``--compile true
--freeze true``), ``oft_batch4/{float32,bfloat16}/results.json`` (4 observations a step), ``oft_avx2/float32``
(an AVX2-only CPU), ``policy/oft/results.json`` (the main job's OpenVLA-OFT rows), ``oft_policy/`` (the bundled
OFT-style policy's closed loop), ``metaworld/policy*/evaluation.json`` (the MetaWorld policy's recipe runs: test
success per task), ``metaworld/table*/results.json`` (its reduction table), ``gpu_h100/run2/b{1,8}/[oft/]results.json``
(OpenVLA-7B and OpenVLA-OFT-7B sizes on an H100, ``benchmarks/gpu``) and ``serve/*.json`` (the load tester's
reports), ``exact/cpu_bench.json``, ``policy_training/`` and the MetaWorld runs' records. Each table sits between
``<!-- table:NAME start -->`` and ``<!-- table:NAME end -->`` in exactly one page (``TABLES``: the README's
headline, the rest in ``docs/results/`` and two guides); everything between the markers is rewritten. The README's
picture, the speed-success trade-off of the main job (``docs/assets/tradeoff.png``), is
drawn from ``policy/results.json`` with its data embedded in the PNG (:mod:`tools.report.figure`).
Every speed called end to end is ``predict_action_speedup`` (the whole ``predict_action``, baseline interleaved);
the phase-sum ``speedup`` is labelled "phase sum". A figure flagged noisy by its run is never a headline.

    python -m tools.report            # rewrite the tables and the figure
    python -m tools.report --check    # exit 1 naming each page (or figure) that differs
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tools.report.figure import FIGURE, draw, embedded_data, figure_data
from tools.report.metaworld import (
    metaworld_headline_table,
    metaworld_policy_table,
    metaworld_recall_table,
    metaworld_runs_table,
    metaworld_table,
)
from tools.report.oft import (
    main_oft_rows,
    main_oft_table,
    oft_avx2_table,
    oft_batch4_table,
    oft_frozen_table,
    oft_table,
)
from tools.report.other import (
    commands_table,
    exact_table,
    gpu_captured_table,
    gpu_headline_table,
    gpu_kernels_table,
    gpu_merge_table,
    gpu_table,
    serve_table,
)
from tools.report.sources import ROOT, Sources
from tools.report.tabletop import (
    headline_table,
    main_table,
    policy_table,
    selection_test_table,
    tabletop_policies_table,
)

# (page path relative to the root, table name, renderer): each table in exactly one page
TABLES: tuple[tuple[str, str, Callable[[Sources], str]], ...] = (
    ("README.md", "commands", commands_table),
    ("README.md", "headline", headline_table),
    ("README.md", "metaworld_headline", metaworld_headline_table),
    ("README.md", "gpu", gpu_headline_table),
    ("docs/results/openvla.md", "main", main_table),
    ("docs/results/openvla-oft.md", "main_oft", main_oft_rows),
    ("docs/results/openvla-oft.md", "oft", oft_table),
    ("docs/results/openvla-oft.md", "oft_frozen", oft_frozen_table),
    ("docs/results/openvla-oft.md", "oft_batch4", oft_batch4_table),
    ("docs/results/openvla-oft.md", "oft_avx2", oft_avx2_table),
    ("docs/results/gpu.md", "gpu_captured", gpu_captured_table),
    ("docs/results/gpu.md", "gpu_kernels", gpu_kernels_table),
    ("docs/results/gpu.md", "gpu_merge", gpu_merge_table),
    ("docs/results/gpu.md", "gpu_h100", gpu_table),
    ("docs/results/metaworld.md", "metaworld_policy", metaworld_policy_table),
    ("docs/results/metaworld.md", "metaworld", metaworld_table),
    ("docs/results/metaworld.md", "metaworld_recall", metaworld_recall_table),
    ("docs/results/serving.md", "serve", serve_table),
    ("docs/results/tabletop.md", "tabletop_policies", tabletop_policies_table),
    ("docs/guides/benchmarking.md", "exact", exact_table),
    ("docs/guides/metaworld.md", "metaworld_runs", metaworld_runs_table),
    ("benchmarks/results/policy/README.md", "policy", policy_table),
    ("benchmarks/results/policy/README.md", "oft", main_oft_table),
    ("benchmarks/results/selection/README.md", "selection_test", selection_test_table),
)


def markers(name: str) -> tuple[str, str]:
    return f"<!-- table:{name} start -->", f"<!-- table:{name} end -->"


def replace_table(text: str, name: str, table: str, where: str = "the page") -> str:
    """``text`` with everything between table ``name``'s markers replaced by ``table``; ValueError when the
    markers are missing or out of order."""
    start, end = markers(name)
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{where} has no {start} ... {end} pair; add both markers where the table goes")
    return text[:i + len(start)] + "\n" + table + "\n" + text[j:]


def rendered(root: Path = ROOT, src: Sources | None = None) -> dict[Path, str]:
    """``{page path: its text with every table re-rendered}``."""
    src = Sources.read(root) if src is None else src
    out: dict[Path, str] = {}
    for rel, name, render in TABLES:
        path = root / rel
        out[path] = replace_table(out.get(path, path.read_text()), name, render(src), rel)
    return out


def figure_is_current(root: Path = ROOT, src: Sources | None = None) -> bool:
    """Whether ``docs/assets/tradeoff.png`` holds the numbers the main job's results file gives."""
    src = Sources.read(root) if src is None else src
    return embedded_data(root / FIGURE) == figure_data(src.main)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.report",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table or the figure differs")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        src = Sources.read(args.root)
        texts = rendered(args.root, src)
    except ValueError as err:
        parser.error(str(err))
    stale = [p for p, text in texts.items() if p.read_text() != text]
    figure_stale = not figure_is_current(args.root, src)
    for path in stale:
        if args.check:
            print(f"{path}: a table differs from its results files; run python -m tools.report",
                  file=sys.stderr)
        else:
            path.write_text(texts[path])
            print(f"wrote {path}")
    if figure_stale:
        if args.check:
            print(f"{args.root / FIGURE}: the figure's data differs from its results file; run "
                  "python -m tools.report", file=sys.stderr)
        else:
            print(f"wrote {draw(figure_data(src.main), args.root / FIGURE)}")
    return 1 if args.check and (stale or figure_stale) else 0

