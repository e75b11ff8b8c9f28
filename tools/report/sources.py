"""The committed results files the report reads (``benchmarks/results/``, the shipped policies' records) and
:class:`Sources`, all of them read once from a checkout."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
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
MW_SHIPPED = Path("prismatic_tr/assets/metaworld_policy")  # evaluation.json: stage 2's run; stage1_*: stage 1's
# stage 2's run as first chosen (step 1000, without the per-task floor), shipped until 2026-11-28, and its tables
MW_STAGE2_STEP1000 = RESULTS / "metaworld" / "stage2_step1000"
METAWORLD_RUNS: tuple[tuple[str, Path | None, tuple[Path, ...]], ...] = (
    ("4-D state, first run", RESULTS / "metaworld" / "policy" / "evaluation.json", ()),
    ("4-D state, continued", RESULTS / "metaworld" / "policy_continued" / "evaluation.json", ()),
    ("7-D state, stopped at step 2150", None,
     tuple(RESULTS / "metaworld" / "policy7_partial" / f"validation_step{s}.json" for s in (1000, 2000))),
    ("7-D state in every action slot: stage 1, 0.5.0's shipped policy (cut off at step 2200 and resumed: its training "
     "minutes are the last 1800 steps')", MW_SHIPPED / "stage1_evaluation.json",
     tuple(RESULTS / "metaworld" / "policy7s_partial" / f"validation_step{s}.json" for s in (1000, 2000))),
    ("stage 2 from stage 1's policy: 1500 steps on more demonstrations of reach, push, pick-place, "
     "peg-insert-side, chosen by the most validation successes (shipped until 2026-11-28)",
     MW_STAGE2_STEP1000 / "evaluation.json", ()),
    ("stage 2, **shipped**: the same run chosen again with a per-task floor (every task >= 7 of 10 on validation; "
     "its scores reused, `--task_floor 0.7`)", MW_SHIPPED / "evaluation.json", ()),
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
    "**shipped**: stage 1 + stage 2 (1500 steps on more demonstrations), chosen with a per-task floor: step 1500":
        MW_SHIPPED / "evaluation.json",
    "stage 2 chosen by the most validation successes: step 1000 (shipped until 2026-11-28)":
        MW_STAGE2_STEP1000 / "evaluation.json",
    "stage 1 (0.5.0's shipped): 7-D state, in every action slot, 4000 steps": MW_SHIPPED / "stage1_evaluation.json",
    "4-D state, 2000 steps": RESULTS / "metaworld" / "policy" / "evaluation.json",
    "4-D state, continued (+2000 steps)": RESULTS / "metaworld" / "policy_continued" / "evaluation.json"}
# eval_metaworld.py runs, per policy (the table's "Model" column -> folder): table/ first, then table_<what>/ runs
# adding settings (their own baseline interleaved for the speed; the unreduced row shown is the first run's)
METAWORLD_TABLES = RESULTS / "metaworld"
METAWORLD_TABLE_SETS = {"the shipped policy": METAWORLD_TABLES / "shipped",
                        "stage 2's step 1000 (shipped until 2026-11-28)": MW_STAGE2_STEP1000,
                        "stage 1 (0.5.0's shipped)": METAWORLD_TABLES}
# train_metaworld_policy.py --init_oft <a policy> --setting S runs (their evaluation.json, in that policy's folder of
# METAWORLD_TABLE_SETS): the fine-tuned rows, tested under S on the same 50 test episodes a task; their speed is the
# training-free row's of S (the same shapes)
METAWORLD_FINETUNES = "finetune_*/evaluation.json"
# benchmarks/gpu/run_7b.sh on a lent H100 (random weights at the 7B sizes, bfloat16): batch -> model -> results file
GPU_RUN = RESULTS / "gpu_h100" / "run2"
GPU_FILES = {batch: {"OpenVLA-7B": GPU_RUN / f"b{batch}" / "results.json",
                     "OpenVLA-OFT-7B": GPU_RUN / f"b{batch}" / "oft" / "results.json"} for batch in (1, 8)}
# benchmarks/gpu/device_check.sh on a lent GPU: eager against CUDA-graph predict_action (benchmarks/gpu/captured.py),
# model label -> batch -> results file; and the kernel profiles (benchmarks/gpu/kernel_profile.py, recounted)
GPU_CAPTURED = RESULTS / "gpu_captured" / "h200_run1"
GPU_CAPTURED_MODELS = {"OpenVLA-OFT-7B": "openvla-oft-7b", "OpenVLA-7B": "openvla-7b"}
GPU_CAPTURED_FILES = {label: {b: GPU_CAPTURED / f"{preset}_b{b}.json" for b in (1, 8)}
                      for label, preset in GPU_CAPTURED_MODELS.items()}
# the same script later with diverse_merge beside diverse at the same keeps (issue 48's merging, its proportional
# attention captured): model label -> batch -> results file
# (projector, then vision site): folder -> model label -> batch -> results file
GPU_MERGE_RUNS = (RESULTS / "gpu_captured" / "h200_merge", RESULTS / "gpu_captured" / "h200_vision_merge")
GPU_MERGE_FILES = {run: {label: {b: run / f"{preset}_b{b}.json" for b in (1, 8)}
                         for label, preset in GPU_CAPTURED_MODELS.items()} for run in GPU_MERGE_RUNS}
GPU_PROFILE_FILES = {"OpenVLA-OFT-7B": GPU_CAPTURED / "profile" / "oft-7b_b1.json",
                     "OpenVLA-7B": GPU_CAPTURED / "profile" / "openvla-7b_b1.json"}
MAIN_COMMAND = "python vla_scripts/benchmark.py"
METAWORLD_RECALL = RESULTS / "metaworld" / "recall" / "recall.json"  # benchmarks/metaworld_recall.py
# the shipped MetaWorld policy timed end to end (eval_metaworld.py --timing_runs 50): first the run that times every
# setting of the README's MetaWorld table in one interleaved run (speed_pair_merge), then the earlier runs, `diverse`
# beside `diverse_merge`: the projector site's, the vision site's, diverse_merge_keys' (each setting against its own
# run's unreduced step; a setting timed in two runs takes the first's)
METAWORLD_SPEED = (RESULTS / "metaworld" / "shipped" / "speed_pair_merge" / "policy" / "results.json",
                   RESULTS / "metaworld" / "shipped" / "speed_merge" / "policy" / "results.json",
                   RESULTS / "metaworld" / "shipped" / "speed_vision_merge" / "policy" / "results.json",
                   RESULTS / "metaworld" / "shipped" / "speed_vision_keys" / "policy" / "results.json")
COMMAND_TIMINGS = RESULTS / "commands"  # benchmarks/time_commands.py: the README's two commands on fresh clones


@dataclass
class Sources:
    """The results files a table is written from, read from ``root``."""

    main: dict[str, Any]  # policy/results.json: {"meta", "records"}
    test100: dict[str, dict[str, Any]]  # setting label -> record of selection/eval_test.json
    test100_meta: dict[str, Any]  # selection/eval_test.json's meta (its command, date, seeds)
    adapter_test100: dict[str, dict[str, Any]]  # adapter name -> its setting's record of its run's eval_test.json
    by_dtype: dict[str, dict[str, dict[str, Any]]]  # dtype -> setting label -> record of speed_<dtype>/results.json
    oft: dict[str, dict[str, Any]]  # dtype -> oft/<dtype>/results.json ({"meta", "records"})
    oft_frozen: dict[str, dict[str, Any]]  # dtype -> oft_frozen/<dtype>/results.json (compiled and frozen blocks)
    main_oft: dict[str, Any] | None  # policy/oft/results.json, the main job's OpenVLA-OFT rows (None: not run)
    oft_policy: dict[str, dict[str, dict[str, Any]]]  # "test" / "test_5obj" -> setting label -> record
    oft_adapters: dict[str, dict[str, Any]]  # OFT adapter name -> {"test": record, "test_5obj": record or None}
    metaworld_policies: dict[str, dict[str, Any]]  # column label -> metaworld/policy*/evaluation.json
    metaworld_tables: dict[str, list[dict[str, Any]]]  # policy -> its table*/results.json ({"meta", "records"})
    metaworld_finetunes: dict[str, list[dict[str, Any]]]  # policy -> its finetune_*/evaluation.json (recipe records)
    gpu: dict[int, dict[str, dict[str, Any]]]  # batch -> model -> gpu_h100 results file ({"meta", "records"})
    gpu_captured: dict[str, dict[int, dict[str, Any]]]  # model -> batch -> gpu_captured file ({"meta", "rows"})
    gpu_merge: dict[Path, dict[str, dict[int, dict[str, Any]]]]  # GPU_MERGE_RUNS folder -> model -> batch -> file
    gpu_profile: dict[str, dict[str, Any]]  # model -> its kernel profile at batch 1 ({..., "rows"})
    oft_batch4: dict[str, dict[str, Any]]  # dtype -> oft_batch4/<dtype>/results.json (4 observations a step)
    oft_avx2: dict[str, dict[str, Any]]  # dtype -> oft_avx2/<dtype>/results.json (an AVX2-only CPU)
    serve: list[dict[str, Any]]  # serve/*.json, the load tester's reports
    exact: dict[str, Any]  # exact/cpu_bench.json (benchmarks/exact_savings.py)
    tabletop: list[dict[str, Any]]  # the TABLETOP_POLICIES records, in order
    test100_5obj: dict[str, dict[str, Any]]  # setting label -> record of selection/eval_test_5obj.json
    metaworld_runs: list[tuple[dict[str, Any] | None, list[dict[str, Any]]]]  # METAWORLD_RUNS read, in order
    commands: list[dict[str, Any]]  # commands/*.json: the README's two commands timed on fresh clones
    metaworld_recall: dict[str, Any] | None  # metaworld/recall/recall.json (None: not measured)
    shipped_adapters: dict[str, str]  # the checkpoint each shipped adapter was made from -> the adapter's name
    metaworld_speed: list[dict[str, Any]]  # METAWORLD_SPEED read, in order ({"meta", "records"})

    @classmethod
    def read(cls, root: Path = ROOT) -> Sources:
        main = read_json(root / POLICY_RESULTS)
        names = [r["adapter"] for r in main["records"] if r.get("adapter")]
        return cls(main=main, test100=by_setting(root / SELECTION_TEST),
                   test100_meta=read_json(root / SELECTION_TEST)["meta"],
                   adapter_test100={n: _adapter_test(root, n) for n in names},
                   by_dtype={d: by_setting(root / p) for d, p in SPEED_BY_DTYPE.items() if (root / p).is_file()},
                   oft={d: read_json(root / p) for d, p in OFT_BY_DTYPE.items()},
                   oft_frozen={d: read_json(root / p) for d, p in OFT_FROZEN_BY_DTYPE.items()},
                   main_oft=read_json(root / MAIN_OFT) if (root / MAIN_OFT).is_file() else None,
                   oft_policy={k: _oft_policy_runs(root, k) for k in OFT_POLICY},
                   oft_adapters={n: _oft_adapter_tests(root, n) for n in _oft_adapter_names(root)},
                   metaworld_policies={label: read_json(root / path) for label, path in METAWORLD_POLICIES.items()},
                   metaworld_tables={label: [read_json(p) for p in metaworld_table_files(root, folder)]
                                     for label, folder in METAWORLD_TABLE_SETS.items()},
                   metaworld_finetunes={label: [read_json(p) for p in metaworld_finetune_files(root, folder)]
                                        for label, folder in METAWORLD_TABLE_SETS.items()},
                   gpu={b: {m: read_json(root / p) for m, p in files.items()} for b, files in GPU_FILES.items()},
                   gpu_captured={m: {b: read_json(root / p) for b, p in files.items()}
                                 for m, files in GPU_CAPTURED_FILES.items()},
                   gpu_merge={run: {m: {b: read_json(root / p) for b, p in files.items()} for m, files in models.items()}
                              for run, models in GPU_MERGE_FILES.items()},
                   gpu_profile={m: read_json(root / p) for m, p in GPU_PROFILE_FILES.items()},
                   oft_batch4={d: read_json(root / p) for d, p in OFT_BATCH4_BY_DTYPE.items()},
                   oft_avx2={d: read_json(root / p) for d, p in OFT_AVX2_BY_DTYPE.items()},
                   serve=[read_json(p) for p in serve_report_files(root)], exact=read_json(root / EXACT),
                   tabletop=[read_json(root / p) for _, p, _ in TABLETOP_POLICIES],
                   test100_5obj=by_setting(root / SELECTION_TEST_5OBJ),
                   metaworld_runs=[(read_json(root / rec) if rec else None, [read_json(root / p) for p in parts])
                                   for _, rec, parts in METAWORLD_RUNS],
                   commands=[read_json(p) for p in command_timing_files(root)],
                   metaworld_recall=read_json(root / METAWORLD_RECALL) if (root / METAWORLD_RECALL).is_file() else None,
                   shipped_adapters=shipped_adapters(root),
                   metaworld_speed=[read_json(root / p) for p in METAWORLD_SPEED])


def source_files(root: Path = ROOT) -> list[Path]:
    """Every results file :meth:`Sources.read` reads (for copying a repository's sources; those it reads only
    when present are listed when present)."""
    main = read_json(root / POLICY_RESULTS)
    adapters = [r["adapter"] for r in main["records"] if r.get("adapter")] + _oft_adapter_names(root)
    fixed = [POLICY_RESULTS, SELECTION_TEST, *SPEED_BY_DTYPE.values(), *OFT_BY_DTYPE.values(),
             *OFT_FROZEN_BY_DTYPE.values(), *OFT_BATCH4_BY_DTYPE.values(), *OFT_AVX2_BY_DTYPE.values(), MAIN_OFT,
             *METAWORLD_POLICIES.values(), *(p for files in GPU_FILES.values() for p in files.values()),
             *(p for files in GPU_CAPTURED_FILES.values() for p in files.values()),
             *(p for models in GPU_MERGE_FILES.values() for files in models.values() for p in files.values()),
             *GPU_PROFILE_FILES.values(), EXACT,
             *(p for _, p, _ in TABLETOP_POLICIES), SELECTION_TEST_5OBJ,
             *(p for _, rec, parts in METAWORLD_RUNS for p in ((rec,) if rec else ()) + parts), *METAWORLD_SPEED]
    runs = {_adapter_run(root, n) for n in adapters}
    found = [root / p for p in fixed]
    found += [root / ADAPTERS / n / "record.json" for n in adapters]
    found += [p for run in sorted(runs) for p in sorted((root / FINETUNE / run).glob("eval_test*.json"))]
    found += sorted((root / FINETUNE).glob("*/record.json"))  # how an adapter's run folder is found
    found += [f for kind in OFT_POLICY for f in oft_policy_files(root, kind)]
    found += metaworld_table_files(root) + metaworld_finetune_files(root) + serve_report_files(root)
    found += command_timing_files(root) + [root / METAWORLD_RECALL] + sorted((root / ADAPTERS).glob("*/record.json"))
    return list(dict.fromkeys(p for p in found if p.is_file()))


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"results file {str(path)!r} does not exist; run the command that writes it first")
    return json.loads(path.read_text())


def by_setting(path: Path) -> dict[str, dict[str, Any]]:
    return {r["setting"]: r for r in read_json(path)["records"]}


def _adapter_run(root: Path, name: str) -> str:
    """The fine-tuning run adapter ``name`` came from: the folder of ``benchmarks/results/finetune_reduced/`` whose
    ``record.json`` (copied there by ``scripts/finetune_reduced.sh``) names the adapter's ``source_checkpoint``, wherever
    the run's outputs were (``OUT_DIR``)."""
    source = read_json(root / ADAPTERS / name / "record.json")["source_checkpoint"]
    runs = [d.name for d in sorted((root / FINETUNE).iterdir())
            if (d / "record.json").is_file() and read_json(d / "record.json").get("source_checkpoint") == source]
    if len(runs) != 1:
        raise ValueError(f"adapter {name!r} comes from {source!r}, which {len(runs)} run folders of "
                         f"{str(root / FINETUNE)!r} record ({runs}); exactly one should")
    return runs[0]


def _adapter_test(root: Path, name: str) -> dict[str, Any]:
    """The record of adapter ``name``'s setting in the eval_test.json of the fine-tuning run it came from."""
    records = read_json(root / FINETUNE / _adapter_run(root, name) / "eval_test.json")["records"]
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
        for label, rec in by_setting(path).items():
            out.setdefault(label, rec)
    return out


def metaworld_table_files(root: Path, folder: Path | None = None) -> list[Path]:
    """``<folder>/table/results.json`` then ``<folder>/table_*/results.json`` (sorted); none before the first; every
    policy's with no ``folder``."""
    if folder is None:
        return [p for f in METAWORLD_TABLE_SETS.values() for p in metaworld_table_files(root, f)]
    first = root / folder / "table" / "results.json"
    return [first, *sorted((root / folder).glob("table_*/results.json"))] if first.is_file() else []


def command_timing_files(root: Path) -> list[Path]:
    return sorted((root / COMMAND_TIMINGS).glob("*.json"))


def serve_report_files(root: Path) -> list[Path]:
    """``serve/*.json``, sorted (the soak repeats in ``serve/soak_repeat/`` are a record, not a table row)."""
    return sorted((root / SERVE_REPORTS).glob("*.json"))


def metaworld_finetune_files(root: Path, folder: Path | None = None) -> list[Path]:
    """``<folder>/finetune_*/evaluation.json``, sorted; every policy's with no ``folder``."""
    if folder is None:
        return [p for f in METAWORLD_TABLE_SETS.values() for p in metaworld_finetune_files(root, f)]
    return sorted((root / folder).glob(METAWORLD_FINETUNES))


def shipped_adapters(root: Path) -> dict[str, str]:
    """``{source checkpoint: adapter name}`` of every adapter under ``prismatic_tr/assets/adapters`` (its
    ``record.json``): which fine-tuning run's choice each shipped adapter is."""
    records = {p.parent.name: json.loads(p.read_text()) for p in sorted((root / ADAPTERS).glob("*/record.json"))}
    return {r["source_checkpoint"]: name for name, r in records.items() if r.get("source_checkpoint")}


def _oft_adapter_names(root: Path) -> list[str]:
    """The shipped adapters of the OFT-style tabletop policy (their record.json says ``"policy": "openvla-oft"`` and
    names no other benchmark: a MetaWorld adapter's results are its recipe's, in the MetaWorld tables)."""
    records = {p.parent.name: json.loads(p.read_text()) for p in (root / ADAPTERS).glob("*/record.json")}
    return sorted(name for name, r in records.items() if r.get("policy") == "openvla-oft" and not r.get("benchmark"))


def _oft_adapter_tests(root: Path, name: str) -> dict[str, Any]:
    """An OFT adapter's test records: its run's eval_test.json and, when measured, eval_test_5obj.json."""
    test = _adapter_test(root, name)
    run = _adapter_run(root, name)
    five = root / FINETUNE / run / "eval_test_5obj.json"
    five_rec = next(r for r in read_json(five)["records"] if r["setting"] != "none") if five.is_file() else None
    return {"setting": test["setting"], "test": test, "test_5obj": five_rec}
