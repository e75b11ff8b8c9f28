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
drawn from ``policy/results.json`` with its data embedded in the PNG (:mod:`prismatic_tr.bench.vla.docs_figure`).
Every speed called end to end is ``predict_action_speedup`` (the whole ``predict_action``, baseline interleaved);
the phase-sum ``speedup`` is labelled "phase sum". A figure flagged noisy by its run is never a headline.

    python -m prismatic_tr.bench.vla.readme_tables            # rewrite the tables and the figure
    python -m prismatic_tr.bench.vla.readme_tables --check    # exit 1 naming each page (or figure) that differs
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
RESULTS = Path("benchmarks/results")
POLICY_RESULTS = RESULTS / "policy" / "results.json"
SELECTION_TEST = RESULTS / "selection" / "eval_test.json"
FINETUNE = RESULTS / "finetune_reduced"
SPEED_BY_DTYPE = {"float32": FINETUNE / "speed_float32" / "results.json",
                  "bfloat16": FINETUNE / "speed_bfloat16" / "results.json"}
OFT_BY_DTYPE = {"float32": RESULTS / "oft" / "float32" / "results.json",
               "bfloat16": RESULTS / "oft" / "bfloat16" / "results.json"}
OFT_FROZEN_BY_DTYPE = {d: RESULTS / "oft_frozen" / d / "results.json" for d in ("float32", "bfloat16")}
OFT_BATCH4_BY_DTYPE = {d: RESULTS / "oft_batch4" / d / "results.json" for d in ("float32", "bfloat16")}
OFT_AVX2_BY_DTYPE = {"float32": RESULTS / "oft_avx2" / "float32" / "results.json"}
SERVE_REPORTS = RESULTS / "serve"
EXACT = RESULTS / "exact" / "cpu_bench.json"
# The tabletop policies' training records, a row each: (label, record, what its "evaluation" is). "old": one
# validation run in "evaluation"; "recipe": {"validation", "test"} from a one-command recipe; the shipped
# OpenVLA-style policy's test episodes are the unreduced rows of the selection runs.
TRAINING = RESULTS / "policy_training"
TABLETOP_POLICIES: tuple[tuple[str, Path, str], ...] = (
    ("run 1: 4000 steps", TRAINING / "evaluation.json", "old"),
    ("run 2: run 1 continued 2000 steps", TRAINING / "evaluation_continued.json", "old"),
    ("run 3: easy scenes mixed in", TRAINING / "evaluation_run3.json", "old"),
    ("run 4: towers pretrained", TRAINING / "evaluation_run4.json", "old"),
    ("run 6, **shipped**: run 5 (task v2, local pretraining, frozen towers) + the grounding loss",
     TRAINING / "evaluation_run6.json", "shipped"),
    ("`train_policy.py`, alone, 2 threads", TRAINING / "remake_alone" / "evaluation.json", "recipe"),
    ("`train_policy.py`, beside another run, 1 thread", TRAINING / "remake_seed0" / "evaluation.json", "recipe"),
    ("`train_policy.py --seed 1 --stage2.seed 2`, beside another run, 1 thread",
     TRAINING / "remake_seed1" / "evaluation.json", "recipe"),
    ("OpenVLA-OFT-style, **shipped**: `train_oft_policy.py`", RESULTS / "oft_policy" / "training" / "evaluation.json",
     "recipe"),
)
SELECTION_TEST_5OBJ = RESULTS / "selection" / "eval_test_5obj.json"
# The MetaWorld recipe's runs in the order they were made: (label, recipe record or None, partial validation runs
# of eval_metaworld.py on its checkpoints); the fine-tunes (finetune_*/) follow.
METAWORLD_RUNS: tuple[tuple[str, Path | None, tuple[Path, ...]], ...] = (
    ("4-D state, first run", RESULTS / "metaworld" / "policy" / "evaluation.json", ()),
    ("4-D state, continued", RESULTS / "metaworld" / "policy_continued" / "evaluation.json", ()),
    ("7-D state, stopped at step 2150", None,
     tuple(RESULTS / "metaworld" / "policy7_partial" / f"validation_step{s}.json" for s in (1000, 2000))),
    ("7-D state in every action slot, **shipped** (cut off at step 2200 and resumed: its training minutes are the last 1800 steps')", Path("prismatic_tr/assets/metaworld_policy/evaluation.json"),
     tuple(RESULTS / "metaworld" / "policy7s_partial" / f"validation_step{s}.json" for s in (1000, 2000))),
)
MAIN_OFT = RESULTS / "policy" / "oft" / "results.json"
# the bundled OFT policy's closed-loop runs: eval_test* (200 test episodes) and eval_test_5obj* (100 five-object
# scenes); a later run adds settings in its own folder (eval_test_<what>), the first file's unreduced row is kept
OFT_POLICY_DIR = RESULTS / "oft_policy"
OFT_POLICY = {"test": "eval_test", "test_5obj": "eval_test_5obj"}
ADAPTERS = Path("prismatic_tr/assets/adapters")
# train_metaworld_policy.py's records, a row each: the shipped policy, then the two earlier 4-D-state runs (the
# first, and its continuation with --init_oft)
METAWORLD_POLICIES = {
    "**shipped**: 7-D state, in every action slot, 4000 steps": Path("prismatic_tr/assets/metaworld_policy/evaluation.json"),
    "4-D state, 2000 steps": RESULTS / "metaworld" / "policy" / "evaluation.json",
    "4-D state, continued (+2000 steps)": RESULTS / "metaworld" / "policy_continued" / "evaluation.json"}
# eval_metaworld.py runs on that policy: table/ first, then table_<what>/ runs adding settings (their own baseline
# interleaved for the speed; the unreduced row shown is the first run's)
METAWORLD_TABLES = RESULTS / "metaworld"
# train_metaworld_policy.py --init_oft <that policy> --setting S runs (their evaluation.json): the fine-tuned rows,
# tested under S on the same 50 test episodes a task; their speed is the training-free row's of S (the same shapes)
METAWORLD_FINETUNES = "finetune_*/evaluation.json"
# benchmarks/gpu/run_7b.sh on a lent H100 (random weights at the 7B sizes, bfloat16): batch -> model -> results file
GPU_RUN = RESULTS / "gpu_h100" / "run2"
GPU_FILES = {batch: {"OpenVLA-7B": GPU_RUN / f"b{batch}" / "results.json",
                     "OpenVLA-OFT-7B": GPU_RUN / f"b{batch}" / "oft" / "results.json"} for batch in (1, 8)}
MAIN_COMMAND = "python vla_scripts/benchmark.py"
ADAPTER_MARK = "\u2020"  # dagger: the adapter row's speed is its setting's


@dataclass
class Sources:
    """The results files a table is written from, read from ``root``."""

    main: dict[str, Any]  # policy/results.json: {"meta", "records"}
    test100: dict[str, dict[str, Any]]  # setting label -> record of selection/eval_test.json
    adapter_test100: dict[str, dict[str, Any]]  # adapter name -> its setting's record of its run's eval_test.json
    by_dtype: dict[str, dict[str, dict[str, Any]]]  # dtype -> setting label -> record of speed_<dtype>/results.json
    oft: dict[str, dict[str, Any]]  # dtype -> oft/<dtype>/results.json ({"meta", "records"})
    oft_frozen: dict[str, dict[str, Any]]  # dtype -> oft_frozen/<dtype>/results.json (compiled and frozen blocks)
    main_oft: dict[str, Any] | None  # policy/oft/results.json, the main job's OpenVLA-OFT rows (None: not run)
    oft_policy: dict[str, dict[str, dict[str, Any]]]  # "test" / "test_5obj" -> setting label -> record
    oft_adapters: dict[str, dict[str, Any]]  # OFT adapter name -> {"test": record, "test_5obj": record or None}
    metaworld_policies: dict[str, dict[str, Any]]  # column label -> metaworld/policy*/evaluation.json
    metaworld_tables: list[dict[str, Any]]  # metaworld/table*/results.json ({"meta", "records"}), table/ first
    metaworld_finetunes: list[dict[str, Any]]  # metaworld/finetune_*/evaluation.json (the recipe's records)
    gpu: dict[int, dict[str, dict[str, Any]]]  # batch -> model -> gpu_h100 results file ({"meta", "records"})
    oft_batch4: dict[str, dict[str, Any]]  # dtype -> oft_batch4/<dtype>/results.json (4 observations a step)
    oft_avx2: dict[str, dict[str, Any]]  # dtype -> oft_avx2/<dtype>/results.json (an AVX2-only CPU)
    serve: list[dict[str, Any]]  # serve/*.json, the load tester's reports
    exact: dict[str, Any]  # exact/cpu_bench.json (benchmarks/exact_savings.py)
    tabletop: list[dict[str, Any]]  # the TABLETOP_POLICIES records, in order
    test100_5obj: dict[str, dict[str, Any]]  # setting label -> record of selection/eval_test_5obj.json
    metaworld_runs: list[tuple[dict[str, Any] | None, list[dict[str, Any]]]]  # METAWORLD_RUNS read, in order

    @classmethod
    def read(cls, root: Path = ROOT) -> Sources:
        main = _json(root / POLICY_RESULTS)
        names = [r["adapter"] for r in main["records"] if r.get("adapter")]
        return cls(main=main, test100=_by_setting(root / SELECTION_TEST),
                   adapter_test100={n: _adapter_test(root, n) for n in names},
                   by_dtype={d: _by_setting(root / p) for d, p in SPEED_BY_DTYPE.items() if (root / p).is_file()},
                   oft={d: _json(root / p) for d, p in OFT_BY_DTYPE.items()},
                   oft_frozen={d: _json(root / p) for d, p in OFT_FROZEN_BY_DTYPE.items()},
                   main_oft=_json(root / MAIN_OFT) if (root / MAIN_OFT).is_file() else None,
                   oft_policy={k: _oft_policy_runs(root, k) for k in OFT_POLICY},
                   oft_adapters={n: _oft_adapter_tests(root, n) for n in _oft_adapter_names(root)},
                   metaworld_policies={label: _json(root / path) for label, path in METAWORLD_POLICIES.items()},
                   metaworld_tables=[_json(p) for p in metaworld_table_files(root)],
                   metaworld_finetunes=[_json(p) for p in metaworld_finetune_files(root)],
                   gpu={b: {m: _json(root / p) for m, p in files.items()} for b, files in GPU_FILES.items()},
                   oft_batch4={d: _json(root / p) for d, p in OFT_BATCH4_BY_DTYPE.items()},
                   oft_avx2={d: _json(root / p) for d, p in OFT_AVX2_BY_DTYPE.items()},
                   serve=[_json(p) for p in serve_report_files(root)], exact=_json(root / EXACT),
                   tabletop=[_json(root / p) for _, p, _ in TABLETOP_POLICIES],
                   test100_5obj=_by_setting(root / SELECTION_TEST_5OBJ),
                   metaworld_runs=[(_json(root / rec) if rec else None, [_json(root / p) for p in parts])
                                   for _, rec, parts in METAWORLD_RUNS])


def source_files(root: Path = ROOT) -> list[Path]:
    """Every results file :meth:`Sources.read` reads (for copying a repository's sources; those it reads only
    when present are listed when present)."""
    main = _json(root / POLICY_RESULTS)
    adapters = [r["adapter"] for r in main["records"] if r.get("adapter")] + _oft_adapter_names(root)
    fixed = [POLICY_RESULTS, SELECTION_TEST, *SPEED_BY_DTYPE.values(), *OFT_BY_DTYPE.values(),
             *OFT_FROZEN_BY_DTYPE.values(), *OFT_BATCH4_BY_DTYPE.values(), *OFT_AVX2_BY_DTYPE.values(), MAIN_OFT,
             *METAWORLD_POLICIES.values(), *(p for files in GPU_FILES.values() for p in files.values()), EXACT,
             *(p for _, p, _ in TABLETOP_POLICIES), SELECTION_TEST_5OBJ,
             *(p for _, rec, parts in METAWORLD_RUNS for p in ((rec,) if rec else ()) + parts)]
    runs = {_adapter_run(root, n) for n in adapters}
    found = [root / p for p in fixed]
    found += [root / ADAPTERS / n / "record.json" for n in adapters]
    found += [p for run in sorted(runs) for p in sorted((root / FINETUNE / run).glob("eval_test*.json"))]
    found += [f for kind in OFT_POLICY for f in oft_policy_files(root, kind)]
    found += metaworld_table_files(root) + metaworld_finetune_files(root) + serve_report_files(root)
    return list(dict.fromkeys(p for p in found if p.is_file()))


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"results file {str(path)!r} does not exist; run the command that writes it first")
    return json.loads(path.read_text())


def _by_setting(path: Path) -> dict[str, dict[str, Any]]:
    return {r["setting"]: r for r in _json(path)["records"]}


def _adapter_run(root: Path, name: str) -> str:
    """The fine-tuning run adapter ``name`` came from (its record.json's ``source_checkpoint``:
    ``outputs/finetune_reduced/<run>/...``), whose records are in ``benchmarks/results/finetune_reduced/<run>``."""
    parts = Path(_json(root / ADAPTERS / name / "record.json")["source_checkpoint"]).parts
    return parts[parts.index("finetune_reduced") + 1]


def _adapter_test(root: Path, name: str) -> dict[str, Any]:
    """The record of adapter ``name``'s setting in the eval_test.json of the fine-tuning run it came from."""
    records = _json(root / FINETUNE / _adapter_run(root, name) / "eval_test.json")["records"]
    return next(r for r in records if r["setting"] != "none")


def oft_policy_files(root: Path, kind: str) -> list[Path]:
    """The results files of one kind of the bundled OFT policy's runs (``OFT_POLICY``), the first run first."""
    first = OFT_POLICY[kind]
    others = [d for d in sorted((root / OFT_POLICY_DIR).glob(f"{first}_*"))
              if kind == "test_5obj" or not d.name.startswith(OFT_POLICY["test_5obj"])]
    return [root / OFT_POLICY_DIR / first / "results.json", *(d / "results.json" for d in others)]


def _oft_policy_runs(root: Path, kind: str) -> dict[str, dict[str, Any]]:
    """Setting label -> record over :func:`oft_policy_files` (a label already read is kept)."""
    out: dict[str, dict[str, Any]] = {}
    for path in oft_policy_files(root, kind):
        for label, rec in _by_setting(path).items():
            out.setdefault(label, rec)
    return out


def metaworld_table_files(root: Path) -> list[Path]:
    """``metaworld/table/results.json`` then ``metaworld/table_*/results.json`` (sorted); none before the first."""
    first = root / METAWORLD_TABLES / "table" / "results.json"
    return [first, *sorted((root / METAWORLD_TABLES).glob("table_*/results.json"))] if first.is_file() else []


def serve_report_files(root: Path) -> list[Path]:
    """``serve/*.json``, sorted (the soak repeats in ``serve/soak_repeat/`` are a record, not a table row)."""
    return sorted((root / SERVE_REPORTS).glob("*.json"))


def metaworld_finetune_files(root: Path) -> list[Path]:
    """``metaworld/finetune_*/evaluation.json``, sorted."""
    return sorted((root / METAWORLD_TABLES).glob(METAWORLD_FINETUNES))


def _oft_adapter_names(root: Path) -> list[str]:
    """The shipped adapters of the OFT-style policy (their record.json says ``"policy": "openvla-oft"``)."""
    return sorted(p.parent.name for p in (root / ADAPTERS).glob("*/record.json")
                  if json.loads(p.read_text()).get("policy") == "openvla-oft")


def _oft_adapter_tests(root: Path, name: str) -> dict[str, Any]:
    """An OFT adapter's test records: its run's eval_test.json and, when measured, eval_test_5obj.json."""
    test = _adapter_test(root, name)
    run = _adapter_run(root, name)
    five = root / FINETUNE / run / "eval_test_5obj.json"
    five_rec = next(r for r in _json(five)["records"] if r["setting"] != "none") if five.is_file() else None
    return {"setting": test["setting"], "test": test, "test_5obj": five_rec}


# ---------------------------------------------------------------- cells

def pct(rate: float | None, low: float | None = None, high: float | None = None) -> str:
    """``96 % (87-99 %)``; ``-`` when not measured."""
    if rate is None:
        return "-"
    text = f"{100 * rate:.0f} %"
    return text + (f" ({100 * low:.0f}-{100 * high:.0f} %)" if low is not None and high is not None else "")


def success(rec: dict[str, Any] | None, prefix: str = "") -> str:
    if rec is None:
        return "-"
    return pct(rec.get(f"{prefix}success_rate"), rec.get(f"{prefix}success_ci_low"), rec.get(f"{prefix}success_ci_high"))


def success_exact(rec: dict[str, Any] | None) -> str:
    """``99.5 % (97.2-99.9 %)``: one decimal, for 200-episode figures whose half points matter; ``-`` if absent."""
    if rec is None:
        return "-"
    return (f"{100 * rec['success_rate']:.1f} % ({100 * rec['success_ci_low']:.1f}-"
            f"{100 * rec['success_ci_high']:.1f} %)")


def end_to_end(rec: dict[str, Any]) -> str:
    """``predict_action_speedup``, ``*`` when the row is flagged noisy, a dagger on an adapter row."""
    return (f"{rec['predict_action_speedup']:.2f}x" + ("*" if rec.get("noise_flag") else "")
            + (ADAPTER_MARK if rec.get("adapter") else ""))


def _fraction(depth: float) -> str:
    f = Fraction(depth).limit_denominator(20)
    return f"{f.numerator}/{f.denominator}"


def _family_parts(family: str) -> list[tuple[str, str, float | None, bool]]:
    """(site, method, depth fraction, compact) per part of a record's ``method`` (its family, e.g.
    ``vision:diverse@0.25:compact+llm:attention@0.25`` or ``diverse``; see ``Setting.family``)."""
    parts = []
    for part in family.split("+"):
        compact = part.endswith(":compact")
        part = part.removesuffix(":compact")
        site, _, rest = part.partition(":")
        if site in ("vision", "llm") and rest:
            method, _, depth = rest.partition("@")
            parts.append((site, method, float(depth) if depth else None, compact))
        else:
            parts.append(("projector", part, None, compact))
    return parts


def describe(rec: dict[str, Any]) -> str:
    """Where a row's tokens are cut and by which method, in words (from its ``site`` and ``method`` fields)."""
    if rec.get("adapter"):
        return f"`{rec['speed_from']}` with its shipped fine-tuned adapter (`{rec['adapter']}`)"
    if rec["site"] == "none":
        return "nowhere"
    words = []
    for site, method, depth, compact in _family_parts(rec["method"]):
        where = {"projector": "after the backbone (`projector`)",
                 "vision": f"inside both towers after {_fraction(depth or 0)} of their blocks (`vision`)",
                 "llm": f"inside the language model after {_fraction(depth or 0)} of its layers (`llm`)"}[site]
        default = " (default)" if method == "diverse" and site != "llm" else ""
        words.append(f"{where}, `{method}`{default}" + (", the earlier renumbered positions (`:compact`)" if compact else ""))
    return " + ".join(words)


def keep(rec: dict[str, Any]) -> str:
    return "all" if rec["site"] == "none" else f"{rec['reduction_ratio']:g}"


def dtype_speeds(rec: dict[str, Any], by_dtype: dict[str, dict[str, dict[str, Any]]]) -> str:
    """``2.05 / 1.53x`` (float32 / bfloat16, one machine) where both files have the row's setting, else ``-``."""
    label = rec.get("speed_from", rec["setting"])
    rows = [by_dtype.get(d, {}).get(label) for d in ("float32", "bfloat16")]
    if any(r is None for r in rows):
        return "-"
    return " / ".join(f"{r['predict_action_speedup']:.2f}" for r in rows) + "x"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |",
            *("| " + " | ".join(row) + " |" for row in rows)]


def _episodes(records: Sequence[dict[str, Any]], key: str) -> int | None:
    return next((r[key] for r in records if r.get(key)), None)


def cpu_words(meta: dict[str, Any]) -> str:
    cpu = meta.get("machine", {}).get("cpu")
    if not cpu:
        return "CPU features not recorded by this run"
    have = [f for f, on in cpu["features"].items() if on]
    return f"{cpu['model']} ({', '.join(have) if have else 'none of ' + ', '.join(cpu['features'])})"


def best_words(meta: dict[str, Any]) -> str:
    best = meta.get("best_on_validation")
    if best is None:
        return "not chosen by this run (no validation episodes recorded)"
    return "; ".join(f"`{site}`: {f'`{s}`' if s else 'none'}" for site, s in best.items()) or "none"


# ---------------------------------------------------------------- tables

def main_table(src: Sources) -> str:
    """docs/results/openvla.md: one row per main-job row, adapters after their setting."""
    meta, records = src.main["meta"], src.main["records"]
    n_test, n_val = _episodes(records, "policy_episodes"), _episodes(records, "validation_episodes")
    dtype = meta.get("dtype", "?")
    header = ["where the tokens are cut, which", "keep", f"end-to-end speedup (cpu-bench, {dtype})",
              "end to end, float32 / bfloat16", f"success, {n_test} test episodes",
              f"success, {n_val} validation episodes" if n_val else "success, validation",
              "success, 100 test episodes"]
    rows = []
    for rec in records:
        test100 = src.adapter_test100.get(rec["adapter"]) if rec.get("adapter") else src.test100.get(rec["setting"])
        rows.append([describe(rec), keep(rec), end_to_end(rec), dtype_speeds(rec, src.by_dtype), success(rec),
                     success(rec, "validation_"), success(test100)])
    notes = [
        "",
        f"End to end: the whole `predict_action`, against the unreduced model in the same interleaved run, "
        f"`{meta.get('command', MAIN_COMMAND)}` ({meta.get('date_utc', '?')[:10]}, {dtype}: {meta.get('dtype_reason') or 'reason not recorded'}; "
        f"{cpu_words(meta)}). \\* flagged noisy by the run: not a result, read as +-0.2. {ADAPTER_MARK} the "
        "adapter's LoRA is merged into the weights, so its step is its setting's: that row's speed, not timed "
        "twice. float32 / bfloat16: `benchmarks/results/finetune_reduced/speed_float32` and `speed_bfloat16`, one "
        "AMX machine, 5 rounds. 100 test episodes: `benchmarks/results/selection/eval_test.json`, adapters "
        "`benchmarks/results/finetune_reduced/*-onpolicy/eval_test.json`.",
        "",
        f"Best setting within 2 points of unreduced success, chosen on the validation episodes among rows faster "
        f"than unreduced and not noisy: {best_words(meta)}.",
    ]
    return "\n".join(_table(header, rows) + notes)


def main_oft_rows(src: Sources) -> str:
    """docs/results/openvla-oft.md, first: the same for OpenVLA-OFT. Speed of every setting timed on cpu-bench-oft in
    both dtypes (benchmarks/results/oft) beside the success of the bundled OFT-style policy under it, shipped OFT
    adapters after their setting."""
    f32, bf16 = ({r["setting"]: r for r in src.oft[d]["records"]} for d in ("float32", "bfloat16"))
    header = ["where the tokens are cut, which (OpenVLA-OFT)", "keep",
              "end to end on cpu-bench-oft, float32 / bfloat16",
              f"bundled OFT policy, {_episodes(list(src.oft_policy['test'].values()), 'episodes')} test episodes",
              f"{_episodes(list(src.oft_policy['test_5obj'].values()), 'episodes')} five-object test scenes"]

    def speeds(label: str) -> str:
        rows = [by.get(label) for by in (f32, bf16)]
        return "-" if None in rows else " / ".join(
            f"{r['predict_action_speedup']:.2f}" + ("*" if r.get("noise_flag") else "") for r in rows) + "x"

    rows = []
    for rec in src.oft["float32"]["records"]:
        label = rec["setting"]
        rows.append([describe(rec), keep(rec), speeds(label), success_exact(src.oft_policy["test"].get(label)),
                     success_exact(src.oft_policy["test_5obj"].get(label))])
        for name, tests in src.oft_adapters.items():
            if tests["setting"] == label:
                rows.append([f"`{label}` with its shipped fine-tuned adapter (`{name}`)", keep(rec),
                             speeds(label) + ADAPTER_MARK, success_exact(tests["test"]),
                             success_exact(tests["test_5obj"])])
    notes = ["", "Speed: `cpu-bench-oft` (cpu-bench's towers and LLM, 2 images, proprio, a chunk of 8 in one pass, "
             "random weights), the eager runs in the next table (`benchmarks/results/oft/`). Success: the "
             "bundled OFT-style policy (`prismatic_tr/assets/tabletop_oft_policy`, the tabletop task's towers and "
             "Llama at policy size) closed loop on the test split, chunks open loop (`benchmarks/results/oft_policy/`"
             f"; adapters: `benchmarks/results/finetune_reduced/oft-*/`). \\* flagged noisy by its run (its p10-p90 "
             f"spread is wide; the next table gives the milliseconds). {ADAPTER_MARK} merged LoRA: the "
             "setting's speed."]
    return "\n".join(_table(header, rows) + notes)


# The README's headline rows: (label, OpenVLA-style setting or adapter, OpenVLA-OFT-style setting or adapter); an
# adapter is named as "<setting> with <adapter>", None: not measured on that policy.
HEADLINE_ROWS: tuple[tuple[str, str | None, str | None], ...] = (
    ("unreduced", "none", "none"),
    ("`projector` keep 0.25", "diverse:0.25", "diverse:0.25"),
    ("`projector` keep 0.1", "diverse:0.1", "diverse:0.1"),
    ("... with its shipped adapter", "diverse:0.1 with projector-diverse-0.1", None),
    ("`vision` keep 0.25 after 1/4 of the towers", "vision:diverse:0.25@0.25", "vision:diverse:0.25@0.25"),
    ("`vision` keep 0.1 after 1/4 of the towers", "vision:diverse:0.1@0.25", "vision:diverse:0.1@0.25"),
    ("... with its shipped adapter", "vision:diverse:0.1@0.25 with vision-diverse-0.1-0.25", None),
    ("`vision` keep 0.1 after 1/20 of the towers", None, "vision:diverse:0.1@0.05"),
    ("... with its shipped adapter", None, "vision:diverse:0.1@0.05 with oft-vision-diverse-0.1-0.05"),
    ("`llm` keep 0.5 after 1/4 of the layers", "llm:attention:0.5@0.25", "llm:attention:0.5@0.25"),
)
NOISY = "noisy"


def headline_speed(rec: dict[str, Any] | None, adapter: bool = False) -> str:
    """End-to-end speed-up of a headline cell; ``noisy`` (never the number) where its run flagged the row, ``-``
    where not measured; a dagger on an adapter's (its setting's speed: merged LoRA, the same shapes)."""
    if rec is None:
        return "-"
    text = NOISY if rec.get("noise_flag") else f"{rec['predict_action_speedup']:.2f}x"
    return text + (ADAPTER_MARK if adapter else "")


def _machine_words(meta: dict[str, Any]) -> str:
    cores = meta.get("machine", {}).get("cpu_count")
    return f"{cpu_words(meta)}" + (f", {cores} cores" if cores else "")


def headline_table(src: Sources) -> str:
    """README.md: OpenVLA-style and OpenVLA-OFT-style side by side, one row per setting (``HEADLINE_ROWS``): the
    end-to-end speed-up from the main job's run (OpenVLA-style, ``cpu-bench``) and the OFT run in the same dtype
    (``cpu-bench-oft``), and success of the bundled policies on held-out test episodes."""
    main_meta = src.main["meta"]
    dtype = main_meta.get("dtype", "?")
    main_by = {r["setting"]: r for r in src.main["records"]}
    oft_run = src.oft.get(dtype) or src.oft["bfloat16"]
    oft_by = {r["setting"]: r for r in oft_run["records"]}
    oft_dtype = oft_run["meta"].get("dtype", "?")
    n_oft = _episodes(list(src.oft_policy["test"].values()), "episodes")

    def openvla(key: str | None) -> tuple[str, str]:
        if key is None:
            return "-", "-"
        setting, _, adapter = key.partition(" with ")
        rec = main_by.get(setting)
        test = src.adapter_test100.get(adapter) if adapter else src.test100.get(setting)
        return headline_speed(rec, bool(adapter)), success(test)

    def oft(key: str | None) -> tuple[str, str]:
        if key is None:
            return "-", "-"
        setting, _, adapter = key.partition(" with ")
        test = src.oft_adapters[adapter]["test"] if adapter else src.oft_policy["test"].get(setting)
        return headline_speed(oft_by.get(setting), bool(adapter)), success_exact(test)

    rows = [[label, *openvla(a), *oft(b)] for label, a, b in HEADLINE_ROWS]
    header = ["setting (`diverse` selection)", f"OpenVLA-style: end to end, cpu-bench, {dtype}",
              "OpenVLA-style: success, bundled policy, 100 test episodes",
              f"OpenVLA-OFT-style: end to end, cpu-bench-oft, {oft_dtype}",
              f"OpenVLA-OFT-style: success, bundled OFT policy, {n_oft} test episodes"]
    notes = ["", f"Speed: the whole `predict_action` at batch 1 against the unreduced model in the same interleaved run, "
             f"random weights at OpenVLA's tower sizes with a 1/16-size Llama. OpenVLA-style: "
             f"`{main_meta.get('command', MAIN_COMMAND)}`, {main_meta.get('date_utc', '?')[:10]}, {dtype}, "
             f"{_machine_words(main_meta)}. OpenVLA-OFT-style (2 images, proprio, a chunk of 8 from one pass): "
             f"`{oft_run['meta'].get('command', '?')}`, {oft_run['meta'].get('date_utc', '?')[:10]}, {oft_dtype}, "
             f"{_machine_words(oft_run['meta'])}. `{NOISY}`: the run flagged the row (its spread or the vision "
             f"gauge), so it is no result. {ADAPTER_MARK} merged LoRA: the setting's speed. Success: closed loop on "
             "the tabletop task's held-out test split (Wilson 95 %), small policies trained here "
             "(`benchmarks/results/selection/`, `benchmarks/results/oft_policy/`, adapters "
             "`benchmarks/results/finetune_reduced/`). Every row, float32 beside bfloat16: the results pages."]
    return "\n".join(_table(header, rows) + notes)


def _cut(rec: dict[str, Any]) -> str:
    return f"{rec.get('cut') or 'none'} / {rec.get('policy_cut') or 'none'}"


def recomputed(meta: dict[str, Any]) -> str:
    """`` (flags recomputed <date> under the current rule by `<command>`)`` where a run's noise flags were gauged
    again from its own percentiles after it ran (:mod:`prismatic_tr.bench.vla.reflag`), else ``""``."""
    from prismatic_tr.bench.measure.noise import RECOMPUTED

    redone = meta.get(RECOMPUTED)
    if not redone:
        return ""
    return f" (flags recomputed {redone['date_utc'][:10]} under the current rule by `{redone['command']}`)"


def policy_table(src: Sources) -> str:
    """benchmarks/results/policy/README.md: the run's facts and one row per record."""
    meta, records = src.main["meta"], src.main["records"]
    n_test, n_val = _episodes(records, "policy_episodes"), _episodes(records, "validation_episodes")
    load = (meta.get("machine", {}).get("load_average_at_start") or ["?"])[0]
    facts = [
        f"- Command: `{meta.get('command', MAIN_COMMAND)}`; {meta.get('date_utc', '?')} UTC; "
        f"{meta.get('wall_s', '?')} s wall time; {meta.get('noisy_rows', '?')} rows flagged noisy{recomputed(meta)}.",
        f"- Machine: {cpu_words(meta)}, {meta.get('machine', {}).get('cpu_count', '?')} cores, "
        f"{meta.get('machine', {}).get('torch_threads', '?')} torch threads, load average {load} at start; "
        f"torch {meta.get('versions', {}).get('torch', '?')}, transformers "
        f"{meta.get('versions', {}).get('transformers', '?')}.",
        f"- Speed: {meta.get('model', '?')}, {meta.get('dtype', '?')} "
        f"({meta.get('dtype_reason') or 'why: not recorded by this run'}).",
        f"- Success: {meta.get('policy_fidelity', '-')}. Validation: {meta.get('validation', 'not measured')}.",
        f"- Best within 2 points, chosen on validation: {best_words(meta)}.",
        "",
    ]
    header = ["setting", "cut on cpu-bench / on the policy", "tokens to the LLM", "predict_action ms (p10-p90)",
              "end-to-end speedup", "phase sum speedup", "vision / prefill / decode ms",
              f"success, {n_test} test episodes", f"success, {n_val} validation episodes" if n_val else
              "success, validation", "noise"]
    rows = [[f"`{r['setting']}`", _cut(r), str(r["llm_visual_tokens"]),
             f"{r['predict_action_ms']:.0f} ({r['predict_action_ms_p10']:.0f}-{r['predict_action_ms_p90']:.0f})",
             f"**{end_to_end(r)}**", f"{r['speedup']:.2f}x",
             f"{r['vision_ms']:.0f} / {r['prefill_ms']:.0f} / {r['decode_ms']:.0f}", success(r),
             success(r, "validation_"), "flagged" if r.get("noise_flag") else ""] for r in records]
    return "\n".join(facts + _table(header, rows))


def oft_rows(runs: dict[str, dict[str, Any]]) -> str:
    """OpenVLA-OFT rows of one or more runs (dtype -> results), settings in the first run's order: per dtype the
    end-to-end speedup and ``predict_action`` ms, where the step's time goes (vision / the one pass / head) and
    the process's peak memory."""
    first = next(iter(runs.values()))["records"]
    by = {d: {r["setting"]: r for r in run["records"]} for d, run in runs.items()}
    header = ["setting", "cut", "visual tokens into / through the pass"]
    for d in runs:
        header += [f"{d}: end to end", f"{d}: predict_action ms", f"{d}: vision / pass / head ms", f"{d}: peak MB"]
    rows = []
    for rec in first:
        row = [f"`{rec['setting']}`", rec.get("cut") or "none", f"{rec['num_patches']} / {rec['llm_visual_tokens']}"]
        for d in runs:
            r = by[d].get(rec["setting"])
            row += (["-"] * 4 if r is None else [
                f"**{end_to_end(r)}**", f"{r['predict_action_ms']:.0f}",
                f"{r['vision_ms']:.0f} / {r['llm_ms']:.0f} / {r['head_ms']:.0f}", f"{r['peak_memory_mb']:.0f}"])
        rows.append(row)
    facts = []
    for d, run in runs.items():
        meta = run["meta"]
        facts.append(f"- {d}: `{meta.get('command', '?')}`; {meta.get('date_utc', '?')[:16]} UTC; {cpu_words(meta)}; "
                     f"{meta.get('noisy_rows', '?')} rows flagged noisy{recomputed(meta)}; {meta.get('wall_s', '?')} s.")
    return "\n".join(_table(header, rows) + ["", *facts])


def oft_table(src: Sources) -> str:
    """docs/results/openvla-oft.md, eager: cpu-bench-oft in float32 and bfloat16 (benchmarks/results/oft)."""
    return oft_rows(src.oft)


def oft_frozen_table(src: Sources) -> str:
    """docs/results/openvla-oft.md, with every block compiled and frozen: cpu-bench-oft in float32 and bfloat16
    (benchmarks/results/oft_frozen)."""
    return oft_rows(src.oft_frozen)


def main_oft_table(src: Sources) -> str:
    """benchmarks/results/policy/README.md: the main job's OpenVLA-OFT rows (policy/oft/results.json)."""
    if src.main_oft is None:
        return ("Not in this run: these results predate the main job's OpenVLA-OFT rows (its OFT results file is "
                "written beside them by the next run).")
    return oft_rows({src.main_oft["meta"].get("dtype", "?"): src.main_oft})


def metaworld_policy_table(src: Sources) -> str:
    """docs/results/metaworld.md: each recipe run's chosen policy, a row each as LIBERO tables are laid out: test success
    per task with its Wilson interval, then the mean over the tasks (successes pooled, with their interval) and the
    mean episode length."""
    from prismatic_tr.eval.intervals import wilson_interval

    tests = {label: rec["evaluation"]["test"] for label, rec in src.metaworld_policies.items()}
    tasks = list(next(iter(tests.values()))["tasks"])
    rows = []
    for label, t in tests.items():
        per_task = [t["tasks"][task] for task in tasks]
        wins, episodes = sum(r["successes"] for r in per_task), sum(r["episodes"] for r in per_task)
        low, high = wilson_interval(wins, episodes)
        rows.append([label, *(pct(r["success_rate"], r["success_ci_low"], r["success_ci_high"]) for r in per_task),
                     f"{wins}/{episodes}, **{100 * t['mean_success_rate']:.1f} %** ({100 * low:.0f}-{100 * high:.0f} %)",
                     f"{sum(r['mean_steps'] for r in per_task) / len(per_task):.0f}"])
    header = ["Policy (test split, 50 episodes a task)", *(f"`{t.removesuffix('-v3')}`" for t in tasks),
              f"mean over the {len(tasks)} tasks", "mean steps"]
    return "\n".join(_table(header, rows))


def metaworld_table(src: Sources) -> str:
    """docs/results/metaworld.md: the reduction table (one row per setting, success per task, mean, end to end), then a
    row per fine-tune (the recipe's test under its setting; the speed is the training-free row's, marked)."""
    from prismatic_tr.eval.intervals import wilson_interval

    if not src.metaworld_tables:
        return ("Not measured yet: `python vla_scripts/eval_metaworld.py --output_dir benchmarks/results/metaworld/table` "
                "(the shipped policy, every setting on the same 50 test episodes a task; a cut-off run resumes) "
                "writes it.")
    runs = [(run["meta"].get("trained_with") or "none", r) for i, run in enumerate(src.metaworld_tables)
            for r in run["records"] if i == 0 or r["setting"] != "none"]
    records = [r for _, r in runs]
    tasks = list(records[0]["tasks"])
    header = ["Setting", "Model", "Visual tokens", *(t.removesuffix("-v3") for t in tasks), "Mean", "End to end"]
    def tokens(r: dict[str, Any]) -> str:
        kept = r.get("llm_visual_tokens", r["num_patches"])
        return str(r["num_patches"]) + (f" -> {kept} in the LLM" if kept != r["num_patches"] else "")

    def model(trained_with: str) -> str:
        return "the policy" if trained_with == "none" else f"fine-tuned with `{trained_with}`"

    def speed(r: dict[str, Any]) -> str:
        return f"{r['predict_action_speedup']:.2f}x" if r.get("predict_action_speedup") else "-"

    def mean(wins: int, episodes: int) -> str:
        low, high = wilson_interval(wins, episodes)
        return f"{wins}/{episodes}, **{100 * wins / episodes:.1f} %** ({100 * low:.0f}-{100 * high:.0f} %)"

    rows = [[f"`{r['setting']}`", model(m), tokens(r), *(pct(r["tasks"][t]["success_rate"]) for t in tasks),
             mean(r["successes"], r["episodes"]), speed(r)] for m, r in runs]
    training_free = {r["setting"]: r for m, r in runs if m == "none"}
    for f in src.metaworld_finetunes:
        test, base = f["evaluation"]["test"], training_free.get(f["setting"])
        chosen = next(c["step"] for c in f["selection"]["candidates"] if c["checkpoint"] == f["selection"]["chosen"])
        rows.append([f"`{f['setting']}`", f"fine-tuned with it: {f['config']['max_steps']} steps from the policy, "
                     f"step {chosen} chosen on validation", tokens(base) if base else "-",
                     *(pct(test["tasks"][t]["success_rate"]) for t in tasks),
                     mean(sum(test["tasks"][t]["successes"] for t in tasks),
                          sum(test["tasks"][t]["episodes"] for t in tasks)),
                     speed(base) + ADAPTER_MARK if base else "-"])
    meta = src.metaworld_tables[0]["meta"]
    notes = [f"Mean: successes pooled over the tasks (Wilson 95 %). End to end: the whole `predict_action` at batch 1 "
             f"in {meta['dtype']}, the median of {meta['config']['timing_runs']} interleaved runs against the unreduced "
             f"one, measured by `{meta['command']}` on {cpu_words(meta)} with {meta['machine']['cores']} cores "
             f"(torch {meta['torch_version']}), {meta['date_utc'][:16]} UTC."]
    if len(rows) > len(runs):
        notes.append(f"{ADAPTER_MARK} the training-free row's speed: fine-tuning changes the weights, not the shapes.")
    return "\n".join(_table(header, rows) + [""] + "\n\n".join(notes).splitlines())


def _gpu_cell(rec: dict[str, Any]) -> str:
    """``45.8 ms, 0.98x*``: the whole predict_action's median and its speed-up (``*``: the row is flagged noisy)."""
    return f"{rec['predict_action_ms']:.1f} ms, {end_to_end(rec)}"


def _gpu_phases(rec: dict[str, Any]) -> str:
    """The unreduced step's phases: towers and the LLM (OpenVLA: prefill + 7 decode steps; OFT: the one pass)."""
    if "llm_ms" in rec:
        return f"towers {rec['vision_ms']:.1f} ms, the one LLM pass {rec['llm_ms']:.1f} ms"
    return f"towers {rec['vision_ms']:.1f} ms, prefill {rec['prefill_ms']:.1f} ms, 7 decode steps {rec['decode_ms']:.1f} ms"


def gpu_table(src: Sources) -> str:
    """docs/results/gpu.md: OpenVLA-7B and OpenVLA-OFT-7B at their real sizes (random weights) on an H100 in
    bfloat16, eager PyTorch, at batch 1 and 8: the whole predict_action per setting, interleaved, and the phases."""
    columns = [(b, m) for b in src.gpu for m in src.gpu[b]]
    by_setting = {(b, m): {r["setting"] or "none": r for r in src.gpu[b][m]["records"]} for b, m in columns}
    settings = list(by_setting[columns[0]])
    rows = [[f"`{s}`", *(_gpu_cell(by_setting[c][s]) if s in by_setting[c] else "-" for c in columns)]
            for s in settings]
    header = ["Setting", *(f"{m}, batch {b}" for b, m in columns)]
    meta = src.gpu[columns[0][0]][columns[0][1]]["meta"]
    facts = ["", "Unreduced phases (medians): " + "; ".join(
        f"{m} batch {b}: {_gpu_phases(by_setting[(b, m)]['none'])}" for b, m in columns) + ".",
             "", f"Measured by `bash benchmarks/gpu/run_7b.sh OUT` on {meta['machine'].get('gpu')}, host "
             f"{cpu_words(meta)} with {meta['machine'].get('cpu_count')} cores (torch {meta['versions']['torch']}, transformers {meta['versions']['transformers']}), "
             f"{meta['date_utc'][:16]} UTC; {meta['config']['num_runs']} interleaved rounds after "
             f"{meta['config']['warmup']} warm-up; `*`: the row is flagged noisy (spread or phase drift), not a result{recomputed(meta)}; "
             f"results in `{GPU_RUN.as_posix()}/`."]
    return "\n".join(_table(header, rows) + facts)


def oft_batch4_table(src: Sources) -> str:
    """docs/results/openvla-oft.md, batched serving: cpu-bench-oft with 4 observations a step, both dtypes."""
    return oft_rows(src.oft_batch4)


def oft_avx2_table(src: Sources) -> str:
    """docs/results/openvla-oft.md, another CPU: cpu-bench-oft in float32 on an AVX2-only machine."""
    return oft_rows(src.oft_avx2)


def serve_table(src: Sources) -> str:
    """docs/results/serving.md: the load tester's reports (``prismatic_tr.serve.report``), soaks last and marked."""
    from prismatic_tr.serve.report import in_reading_order, markdown_table

    return markdown_table(in_reading_order(src.serve))


def success_of(rec: dict[str, Any] | None) -> str:
    """``93.0 % of 200 (88.6-95.8 %)``; ``-`` when not measured."""
    if rec is None:
        return "-"
    return (f"{100 * rec['success_rate']:.1f} % of {rec['episodes']} ({100 * rec['success_ci_low']:.1f}-"
            f"{100 * rec['success_ci_high']:.1f} %)")


def _minutes(record: dict[str, Any]) -> str:
    total = sum(record["minutes"].values()) if record.get("minutes") else record.get("train_minutes")
    return f"{total:.0f}" if total else "-"


def tabletop_policies_table(src: Sources) -> str:
    """docs/results/tabletop.md: every training run of the tabletop policies, from its record: success on the
    validation split (the choosing one) and the held-out test split, the minutes of its stages and its threads."""
    rows = []
    for (label, path, kind), rec in zip(TABLETOP_POLICIES, src.tabletop, strict=True):
        ev = rec["evaluation"]
        if kind == "recipe":
            val, test, five = ev["validation"], ev["test"], None
            if path.parent.parent == OFT_POLICY_DIR:
                five = src.oft_policy["test_5obj"].get("none")
        else:
            val, test, five = ev, None, None
            if kind == "shipped":
                test, five = src.test100.get("none"), src.test100_5obj.get("none")
        rows.append([label, success_of(val), success_of(test), success_of(five), _minutes(rec),
                     str(rec.get("torch_threads") or "-"), f"`{path.relative_to(RESULTS).as_posix()}`"])
    header = ["policy, run", "validation", "test", "five-object test scenes", "minutes on 2 cores",
              "torch threads", "record (`benchmarks/results/`)"]
    notes = ["", "Validation: seeds 1,000,000 on (the split that chooses); test: seeds 3,000,000 on (reported only); "
             "Wilson 95 % intervals. Minutes: the record's stages summed (demonstrations, pretraining, training, "
             "choice, evaluation; run 2: its training). The shipped OpenVLA-style policy's test figures are the "
             "unreduced rows of `selection/eval_test.json` and `selection/eval_test_5obj.json`; the OFT-style one's "
             "five-object scenes are `oft_policy/eval_test_5obj/`."]
    return "\n".join(_table(header, rows) + notes)


def exact_table(src: Sources) -> str:
    """docs/guides/benchmarking.md: the exact savings (OpenVLA's towers stop at the kept block), measured by
    ``benchmarks/exact_savings.py``."""
    e = src.exact
    rows = [["towers run every block, as OpenVLA's do", f"{e['all_blocks_ms']:.0f}", "1.00x"],
            ["towers stop after the kept block", f"{e['stop_early_ms']:.0f}", f"{e['speedup']:.2f}x"]]
    notes = ["", f"`{e['command']}`: {e['model']}, {e['dtype']}, {e['repeats']} interleaved runs after {e['warmup']} "
             f"warm-up, {e['threads']} threads (torch {e['torch']}); saved {e['saved_ms']:.0f} ms a step; actions "
             + ("bit-identical." if e["identical_actions"] else "NOT identical.")]
    return "\n".join(_table(["towers", "predict_action ms", "end to end"], rows) + notes)


def _mw_validation(record: dict[str, Any] | None, partial: Sequence[dict[str, Any]]) -> str:
    """``step 1000: 15 %, step 2000: 38 %``: validation success at each checkpoint, from the partial runs first,
    then the recipe's choice (the chosen step in bold)."""
    points: dict[int, tuple[int, int]] = {}
    for run in partial:
        step = int(run["meta"]["model"].rstrip("/").rsplit("_", 1)[-1])
        rec = next(r for r in run["records"] if r["setting"] == "none")
        points[step] = (rec["successes"], rec["episodes"])
    chosen = None
    if record is not None:
        sel = record["selection"]
        n = sel["episodes_per_task"] * len(record["evaluation"]["test"]["tasks"])
        for c in sel["candidates"]:
            points[c["step"]] = (c["successes"], n)
        chosen = next(c["step"] for c in sel["candidates"] if c["checkpoint"] == sel["chosen"])
    return ", ".join((f"**{step}: {100 * w / n:.0f} %**" if step == chosen else f"{step}: {100 * w / n:.0f} %")
                     for step, (w, n) in sorted(points.items()))


def _mw_test(record: dict[str, Any] | None) -> str:
    if record is None:
        return "-"
    tasks = record["evaluation"]["test"]["tasks"].values()
    wins, episodes = sum(t["successes"] for t in tasks), sum(t["episodes"] for t in tasks)
    return f"{wins}/{episodes}, {100 * wins / episodes:.1f} %"


def _mw_minutes(record: dict[str, Any] | None) -> str:
    if record is None:
        return "-"
    m = record["minutes"]
    return f"{m['training']:.0f} / {m['selection']:.0f} / {m['evaluation_test']:.0f}"


def metaworld_runs_table(src: Sources) -> str:
    """docs/guides/metaworld.md: every run of the MetaWorld recipe (``METAWORLD_RUNS``, then the fine-tunes):
    validation success at its checkpoints (10 episodes a task), its test (50 a task) and its minutes."""
    rows = [[label, _mw_validation(rec, parts), _mw_test(rec), _mw_minutes(rec),
             (rec or parts[0]["meta"])["machine"]["cpu"]["model"] if (rec or parts[0]["meta"]).get("machine") else "-"]
            for (label, _, _), (rec, parts) in zip(METAWORLD_RUNS, src.metaworld_runs, strict=True)]
    rows += [[f"fine-tuned with `{f['setting']}` from the shipped policy", _mw_validation(f, ()), _mw_test(f),
              _mw_minutes(f), f.get("machine", {}).get("cpu", {}).get("model", "-")] for f in src.metaworld_finetunes]
    header = ["run", "validation success by checkpoint step (chosen in bold)", "test, all tasks",
              "minutes: training / choosing / testing", "CPU"]
    notes = ["", "Validation: 10 episodes a task (100 in all), the split that chooses; a run's first checkpoints "
             "without a recipe record were evaluated by `eval_metaworld.py --split validation --episodes 10` "
             "(`benchmarks/results/metaworld/policy7*_partial/validation_step*.json`). Test: 50 episodes a task on "
             "held-out goals. Records: `benchmarks/results/metaworld/`, the shipped policy's "
             "`prismatic_tr/assets/metaworld_policy/evaluation.json`."]
    return "\n".join(_table(header, rows) + notes)


# (page path relative to the root, table name, renderer): each table in exactly one page
TABLES: tuple[tuple[str, str, Callable[[Sources], str]], ...] = (
    ("README.md", "headline", headline_table),
    ("docs/results/openvla.md", "main", main_table),
    ("docs/results/openvla-oft.md", "main_oft", main_oft_rows),
    ("docs/results/openvla-oft.md", "oft", oft_table),
    ("docs/results/openvla-oft.md", "oft_frozen", oft_frozen_table),
    ("docs/results/openvla-oft.md", "oft_batch4", oft_batch4_table),
    ("docs/results/openvla-oft.md", "oft_avx2", oft_avx2_table),
    ("docs/results/gpu.md", "gpu_h100", gpu_table),
    ("docs/results/metaworld.md", "metaworld_policy", metaworld_policy_table),
    ("docs/results/metaworld.md", "metaworld", metaworld_table),
    ("docs/results/serving.md", "serve", serve_table),
    ("docs/results/tabletop.md", "tabletop_policies", tabletop_policies_table),
    ("docs/guides/benchmarking.md", "exact", exact_table),
    ("docs/guides/metaworld.md", "metaworld_runs", metaworld_runs_table),
    ("benchmarks/results/policy/README.md", "policy", policy_table),
    ("benchmarks/results/policy/README.md", "oft", main_oft_table),
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
    from prismatic_tr.bench.vla.docs_figure import FIGURE, embedded_data, figure_data

    src = Sources.read(root) if src is None else src
    return embedded_data(root / FIGURE) == figure_data(src.main)


def main(argv: Sequence[str] | None = None) -> int:
    from prismatic_tr.bench.vla.docs_figure import FIGURE, draw, figure_data

    parser = argparse.ArgumentParser(prog="python -m prismatic_tr.bench.vla.readme_tables",
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
            print(f"{path}: a table differs from its results files; run python -m prismatic_tr.bench.vla.readme_tables",
                  file=sys.stderr)
        else:
            path.write_text(texts[path])
            print(f"wrote {path}")
    if figure_stale:
        if args.check:
            print(f"{args.root / FIGURE}: the figure's data differs from its results file; run "
                  "python -m prismatic_tr.bench.vla.readme_tables", file=sys.stderr)
        else:
            print(f"wrote {draw(figure_data(src.main), args.root / FIGURE)}")
    return 1 if args.check and (stale or figure_stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
