"""Success against fine-tuning steps: the curves of the fine-tuning runs under reduction (``benchmarks/finetune_curves.py``).

Reads the records ``scripts/finetune_reduced.sh`` writes (``<results>/finetune_reduced/<run>/``:
``eval_val_step_*.json`` per checkpoint on the validation split, ``eval_test*.json`` on the test split) and the
training-free figures of the same settings (``<results>/selection/eval_val_*.json``, ``eval_test.json``; the OFT-style
policy's ``<results>/oft_policy/eval_test*``), step 0 of each curve. :func:`read_runs` reads the runs, :func:`table`
is the markdown table, :func:`plot` draws the curves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prismatic_tr.policy.adapters import ADAPTERS_DIR

OFT_PREFIX = "oft-"  # runs of scripts/finetune_reduced.sh with POLICY=oft


def rates(path: Path) -> dict[str, tuple[float, float, float, int]]:
    """{setting: (success rate, Wilson low, Wilson high, episodes)} of one eval_policy results file."""
    data = json.loads(path.read_text())
    return {r["setting"]: (r["success_rate"], r["success_ci_low"], r["success_ci_high"], r["episodes"])
            for r in data["records"]}


def training_free_files(results: Path, oft: bool = False) -> dict[str, list[Path]]:
    """{split: results files} of the bundled policy's (``oft``: the bundled OFT-style policy's) training-free runs
    under ``results``; the OFT-style policy's: its 200 test episodes (no validation run of its settings is kept)."""
    if oft:
        return {"validation": [], "test": [p / "results.json" for p in sorted((results / "oft_policy").glob(
            "eval_test*")) if "5obj" not in p.name]}
    return {"validation": sorted((results / "selection").glob("eval_val_*.json")),
            "test": [results / "selection" / "eval_test.json"]}


def training_free(results: Path, setting: str, split: str, oft: bool = False) -> tuple[float, float, float, int] | None:
    """The bundled policy's (``oft``: the bundled OFT-style policy's) success under ``setting`` before any
    fine-tuning (None when not recorded); an untrained ``learned`` scorer picks exactly as ``diverse``
    (tests/reducers/test_learned_selection.py), so it reads those."""
    setting = setting.replace(":learned:", ":diverse:")
    for path in training_free_files(results, oft)[split]:
        if path.is_file() and setting in (found := rates(path)):
            return found[setting]
    return None


def run_rows(run: Path) -> dict[str, Any]:
    """One run's curve: [(step, setting rate, unreduced rate)], its setting and its test rows."""
    curve, setting = [], None
    for path in sorted(run.glob("eval_val_step_*.json")):
        found = rates(path)
        setting = next(s for s in found if s != "none")
        step = int(re.search(r"step_(\d+)", path.name).group(1))
        curve.append((step, found[setting], found.get("none")))
    tests = {test_label(path, run): rates(path) for path in sorted(run.glob("eval_test*.json"))}
    return {"name": run.name, "setting": setting, "curve": curve, "tests": tests,
            "oft": run.name.startswith(OFT_PREFIX)}


def read_runs(runs: Path) -> list[dict[str, Any]]:
    """:func:`run_rows` of every run folder under ``runs`` with a validation curve (``eval_val_step_*.json``)."""
    return [run_rows(p) for p in sorted(runs.iterdir()) if p.is_dir() and any(p.glob("eval_val_step_*.json"))]


def checkpoint_step(path: Path, run: Path) -> int:
    """The training step of the checkpoint a test results file measured, from its command (``--vla_path
    .../step_N``, or ``--adapter``: a shipped adapter's record, or the run's own installed adapter, the one
    ``chosen.txt`` names); ValueError when the file does not say."""
    command = json.loads(path.read_text())["meta"]["command"]
    found = re.search(r"--vla_path \S*step_(\d+)", command)
    if found:
        return int(found.group(1))
    adapter = re.search(r"--adapter (\S+)", command)
    if adapter:
        name = adapter.group(1)
        record = ADAPTERS_DIR / name / "record.json"
        source = (json.loads(record.read_text())["source_checkpoint"] if "/" not in name and record.is_file()
                  else (run / "chosen.txt").read_text() if (run / "chosen.txt").is_file() else "")
        found = re.search(r"step_(\d+)", source)
        if found:
            return int(found.group(1))
    raise ValueError(f"{path}: its command names no checkpoint step ({command})")


def test_label(path: Path, run: Path) -> str:
    """``chosen, step 1200`` for eval_test.json (``step 1200`` when the run records no choice), ``more, step 400``
    for eval_test_more.json, ``step 900`` for eval_test_step_000900.json: every test figure names its checkpoint."""
    name = path.stem.removeprefix("eval_test").lstrip("_") or ("chosen" if (run / "chosen.txt").is_file() else "")
    step = checkpoint_step(path, run)
    return f"step {step}" if not name or name.startswith("step_") else f"{name}, step {step}"


def pct(value: tuple[float, float, float, int] | None, interval: bool = False) -> str:
    if value is None:
        return ""
    text = f"{100 * value[0]:.1f}".removesuffix(".0") + " %"  # 99.5 % of 200 episodes is not 100 %
    return text + (f" ({100 * value[1]:.0f}-{100 * value[2]:.0f})" if interval else "")


def table(runs: list[dict[str, Any]], results: Path) -> str:
    """The markdown table: per run, the training-free row (from ``results``), the validation curve and the test rows."""
    lines = ["| run | setting | checkpoint | validation, setting | validation, unreduced | test, setting | "
             "test, unreduced |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        s = r["setting"]
        oft = r.get("oft", False)
        lines.append(f"| {r['name']} | `{s}` | training-free | {pct(training_free(results, s, 'validation', oft))} | | "
                     f"{pct(training_free(results, s, 'test', oft), True)} | |")
        for step, val, none in r["curve"]:
            lines.append(f"| | | step {step} | {pct(val)} | {pct(none)} | | |")
        for name, found in r["tests"].items():
            lines.append(f"| | | test: {name} | | | {pct(found.get(s), True)} | {pct(found.get('none'), True)} |")
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], out: Path, results: Path) -> None:
    """``out``: one panel per run, success under the setting and of the same weights unreduced against steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.6), squeeze=False, sharey=True)
    for ax, r in zip(axes[0], runs, strict=True):
        start = training_free(results, r["setting"], "validation", r.get("oft", False))
        steps = ([0] if start else []) + [c[0] for c in r["curve"]]
        under = ([start[0]] if start else []) + [c[1][0] for c in r["curve"]]
        ax.plot(steps, [100 * u for u in under], "o-", label="under the setting")
        nones = [(c[0], c[2][0]) for c in r["curve"] if c[2] is not None]
        ax.plot([n[0] for n in nones], [100 * n[1] for n in nones], "s--", label="same weights, unreduced")
        bundled = training_free(results, "none", "validation", r.get("oft", False))
        if bundled is not None:
            ax.axhline(100 * bundled[0], color="grey", linestyle=":", label="bundled policy, unreduced")
        ax.set_title(f"{r['name']}\n{r['setting']}", fontsize=8)
        ax.set_xlabel("fine-tuning steps (batch 16)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("success, 100 validation episodes (%)")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Bundled tabletop policies (oft-: the OFT-style one) fine-tuned under reduction (validation split)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
