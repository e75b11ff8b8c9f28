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


def test_the_metaworld_pages_prose_figures_equal_their_files() -> None:
    """The figures docs/results/metaworld.md states in prose about the 2026-11-28 runs (outside the generated
    tables) are recomputed from the files they come from: the merge comparison, the longer adapter run and the
    slots' attention shares."""
    import json

    page = " ".join((ROOT / "docs" / "results" / "metaworld.md").read_text().split())
    shipped = RESULTS / "metaworld" / "shipped"
    merge = {r["setting"]: r for r in json.loads((shipped / "validation_merge" / "results.json").read_text())["records"]}
    pct = {s: round(100 * r["successes"] / r["episodes"]) for s, r in merge.items()}
    assert all(r["episodes"] == 100 for r in merge.values())
    assert (f"{pct['diverse_merge:0.25']} % against {pct['diverse:0.25']} % at keep 0.25, {pct['diverse_merge:0.1']} % "
            f"against {pct['diverse:0.1']} % at keep 0.1 (100 episodes each, unreduced {pct['none']} %)") in page
    longer = json.loads((shipped / "finetune_projector-0.1-onpolicy-lora-1500steps" / "evaluation.json").read_text())
    best = max(c["successes"] for c in longer["selection"]["candidates"])
    test = longer["evaluation"]["test"]["tasks"]
    rate = 100 * sum(t["successes"] for t in test.values()) / sum(t["episodes"] for t in test.values())
    assert f"reached {best} of 100 validation episodes at best" in page and not longer["selection"]["reach_floor"]
    assert f"its test, reported only, {rate:.1f} %: reach falls to {100 * test['reach-v3']['success_rate']:.0f} %" in page
    shipped_run = json.loads((shipped / "finetune_projector-0.1-onpolicy-lora" / "evaluation.json").read_text())
    chosen = shipped_run["selection"]["chosen"]
    assert f"against the 600-step adapter's {next(c['successes'] for c in shipped_run['selection']['candidates'] if c['checkpoint'] == chosen)}" in page
    attention = {r["camera"]: r for r in json.loads((RESULTS / "metaworld" / "recall" / "recall.json").read_text())[
        "attention"] if r["task"] == "all"}
    corner = attention["corner3"]
    assert f"(object {100 * corner['object_attention']:.1f} % of {100 * corner['object_area']:.1f} %)" in page
    labelled = sum(r[f"{label}_attention"] for r in attention.values() for label in ("object", "goal", "gripper"))
    assert f"about two thirds ({100 * (1 - labelled):.0f} %)" in page
    wrist = attention["gripperPOV"]
    lifts = sorted(wrist[f"{label}_attention"] / wrist[f"{label}_area"] for label in ("object", "gripper"))
    assert f"get {lifts[0]:.1f}-{lifts[1]:.0f} times their area" in page


def test_the_metaworld_pages_proportional_attention_figures_equal_their_files() -> None:
    """The prose figures of ``diverse_merge`` with proportional attention on docs/results/metaworld.md (validation
    and test, at the projector and the vision site) and in the speed READMEs are recomputed from their files."""
    import json

    page = " ".join((ROOT / "docs" / "results" / "metaworld.md").read_text().split())
    shipped = RESULTS / "metaworld" / "shipped"

    def records(path: Path) -> dict:
        return {r["setting"]: r for r in json.loads(path.read_text())["records"]}

    test = records(shipped / "table" / "results.json")
    keeps = ("0.5", "0.25", "0.1")

    def rate(s: str) -> float:
        return 100 * test[s]["successes"] / test[s]["episodes"]

    # (validation folder, how a keep's setting is named, the selecting method's name on the page)
    for folder, named, plain_name in (("validation_proportional", "diverse_merge:{}", "`diverse`"),
                                      ("validation_vision_merge", "vision:diverse_merge:{}@0.25", "`vision:diverse`")):
        val = records(shipped / folder / "results.json")
        chosen = " / ".join(f"{100 * val[named.format(k)]['successes'] / val[named.format(k)]['episodes']:.0f}"
                            for k in keeps)
        assert f"Chosen on validation ({chosen} % at keep 0.5 / 0.25 / 0.1 against {val['none']['successes']} %" in page
        merged = " / ".join(f"{rate(named.format(k)):.1f}" for k in keeps)
        under = " / ".join(f"{rate('none') - rate(named.format(k)):.1f}" for k in keeps)
        plain = " / ".join(f"{rate(named.format(k).replace('diverse_merge', 'diverse')):.1f}" for k in keeps)
        assert (f"on the test split {merged} % against {rate('none'):.1f} % unreduced ({under} points under it; "
                f"{plain_name} {plain} %)") in page, folder
    later = records(shipped / "validation_vision_merge_depth" / "results.json")  # the vision merge cut later
    at_half = " / ".join(f"{100 * later[f'vision:diverse_merge:{k}@0.5']['successes'] / 100:.0f}" for k in keeps)
    assert all(r["episodes"] == 100 for r in later.values())
    assert f"was no better on validation: {at_half} % at keep 0.5 / 0.25 / 0.1" in page
    for folder, name in (("finetune_vision-merge-0.1-0.25-onpolicy-lora", "`vision:diverse_merge:0.1@0.25`"),
                         ("finetune_projector-merge-0.1-onpolicy-lora-seed1", "`diverse_merge:0.1` at the projector site")):
        run = json.loads((shipped / folder / "evaluation.json").read_text())  # a shipped adapter's recipe record
        tasks = run["evaluation"]["test"]["tasks"].values()
        got = 100 * sum(t["successes"] for t in tasks) / sum(t["episodes"] for t in tasks)
        sel = run["selection"]
        step, val = next((c["step"], c["successes"]) for c in sel["candidates"] if c["checkpoint"] == sel["chosen"])
        assert f"{name} **{got:.1f} %**" in page and f"step {step}, {val} % on validation" in page, folder
    # the paired costs the page quotes against issue 48's bounds: the table's column, recomputed from the episodes
    from tools.report.cells import paired_change

    unreduced = test["none"]["tasks"]
    for setting in ("diverse_merge:0.5", "vision:diverse_merge:0.5@0.25", "diverse_merge:0.25",
                    "vision:diverse_merge:0.25@0.25"):
        diff, interval = paired_change(unreduced, test[setting]["tasks"]).split(" ", 1)
        assert re.search(rf"`{re.escape(setting)}` costs {re.escape(diff.lstrip('-'))}( points)? {re.escape(interval)}",
                         page), setting
    for folder, name in (("finetune_vision-merge-0.1-0.25-onpolicy-lora", "the vision one"),
                         ("finetune_projector-merge-0.1-onpolicy-lora-seed1", "the projector one")):
        run = json.loads((shipped / folder / "evaluation.json").read_text())
        assert f"{name} {paired_change(unreduced, run['evaluation']['test']['tasks'])}" in page, folder
    for speed in (shipped / "speed_merge", shipped / "speed_vision_merge"):  # each site's speed README
        readme = " ".join((speed / "README.md").read_text().split())
        for name, column in (("policy", 0), ("cpu-bench-oft", 1)):
            for setting, r in records(speed / name / "results.json").items():
                if setting == "none":
                    continue
                cell = f"{r['predict_action_speedup']:.2f}x" + (" (noisy)" if r.get("noise_flag") else "") + \
                    (" (slower)" if r["predict_action_speedup"] < 1 else "")
                row = re.search(rf"\| `{re.escape(setting)}` \|([^|]*)\|([^|]*)\|", readme)
                assert row and row.group(1 + column).strip() == cell, (name, setting, cell, row and row.group(0))


RUN_SCRIPTS = sorted(RESULTS.rglob("run.sh"))


@pytest.mark.parametrize("script", RUN_SCRIPTS, ids=lambda p: str(p.parent.relative_to(RESULTS)))
def test_every_results_run_script_changes_into_the_repository(script: Path) -> None:
    """A results folder's ``run.sh`` runs from the repository root wherever the clone is: its one ``cd`` is relative
    to the script and lands on the root (a folder moved one level deeper would otherwise run from the wrong place)."""
    cds = re.findall(r'^\s*cd "\$\(dirname "\$0"\)/([./]+)"\s*$', script.read_text(), flags=re.M)
    assert len(cds) == 1, f"{script.relative_to(ROOT)}: one `cd \"$(dirname \"$0\")/../..\"` expected, found {cds}"
    assert (script.parent / cds[0]).resolve() == ROOT, f"{script.relative_to(ROOT)}: cd {cds[0]} is not the root"


def test_every_patched_runs_journal_names_its_patch() -> None:
    """A results folder made by a benchmark script that patches the model (merge groups, camera budgets, the merge
    after the projector) journals that patch in its identity, as the script's ``run.sh`` would ask for it: so the
    ``run.sh`` resumes there, and a plain run (or another patch) is refused there."""
    import json

    from helpers.benchmark_scripts import load_benchmark

    journal_patch = load_benchmark("metaworld_merge_groups").journal_patch
    checked = 0
    for script in sorted(RESULTS.rglob("run.sh")):
        text = script.read_text()
        if "metaworld_merge_groups.py" in text:
            locality = re.search(r"--locality ([\d.]+)", text)
            want = journal_patch(re.search(r"--groups (\w+)", text).group(1),
                                 float(locality.group(1)) if locality else 1.0)
        elif "metaworld_camera_budget.py" in text:
            want = {"camera_budgets": [float(f) for f in re.search(r"--budgets ([\d.,]+)", text).group(1).split(",")]}
        elif "metaworld_projected_merge.py" in text:
            want = load_benchmark("metaworld_projected_merge").PATCH if "--after_projector" in text else None
        else:
            continue
        with open(script.parent / "episodes.jsonl") as f:
            identity = json.loads(f.readline())["identity"]
        assert identity.get("patch") == want, script.relative_to(ROOT)
        checked += 1
    assert checked >= 18  # 9 merge-groups folders, 7 camera-budget ones, 2 projected-merge ones


def test_the_merge_groups_readme_figures_equal_their_files() -> None:
    """The successes `validation_merge_groups/README.md` tabulates, and the test figure it and the MetaWorld page
    give, are recomputed from the runs' ``results.json``."""
    import json

    folder = RESULTS / "metaworld" / "shipped" / "validation_merge_groups"
    text = (folder / "README.md").read_text()
    page = " ".join((ROOT / "docs" / "results" / "metaworld.md").read_text().split())

    def successes(run: str) -> dict[str, int]:
        return {r["setting"]: r["successes"] for r in json.loads((folder / run / "results.json").read_text())["records"]}

    hard_settings = ["diverse_merge:0.5", "vision:diverse_merge:0.5@0.25", "diverse_merge:0.25",
                     "vision:diverse_merge:0.25@0.25"]
    for groups in ("mean", "anchor", "representative", "local", "lloyd"):
        got = successes(f"hard_{groups}")
        row = f"| `{groups}` (`hard_{groups}/`) | " + " | ".join(str(got[s]) for s in hard_settings) + " |"
        assert row in text, row
    unreduced = successes("hard_mean")["none"], successes("others_mean")["none"]
    assert f"unreduced: **{unreduced[0]}**" in text
    assert f"| unreduced | {unreduced[0]} | {unreduced[1]} | **{sum(unreduced)}** |" in text
    for groups in ("mean", "anchor", "representative"):
        pair = successes(f"hard_{groups}")["vision:diverse_merge:0.5@0.25"], \
            successes(f"others_{groups}")["vision:diverse_merge:0.5@0.25"]
        assert f"| `{groups}` | {pair[0]} | {pair[1]} | " in text and str(sum(pair)) in text
    test = json.loads((folder / "test_representative" / "results.json").read_text())["records"]
    won = {r["setting"]: (r["successes"], r["episodes"]) for r in test}
    chosen = won["vision:diverse_merge:0.5@0.25"]
    rate = f"{100 * chosen[0] / chosen[1]:.1f} %"
    assert f"{chosen[0]}/{chosen[1]}, {rate}" in text and f"unreduced {won['none'][0]}/{won['none'][1]}" in text
    assert f"gave {rate} on test" in page


@pytest.mark.parametrize("folder", ["val_merge", "val_vision_merge", "val_vision_keys"])
def test_the_tabletop_merge_validation_figures_equal_their_files(folder: str) -> None:
    """The validation successes (with their Wilson intervals) the tabletop `diverse_merge` READMEs tabulate are their
    run's ``results.json``, row for row."""
    import json

    run = RESULTS / "selection" / folder
    records = {r["setting"]: r for r in json.loads((run / "results.json").read_text())["records"]}
    rows = re.findall(r"^\| (unreduced|`[^`]+`) \| (\d+) % \((\d+)-(\d+)\) \|$", (run / "README.md").read_text(), re.M)
    assert sorted(label.strip("`").replace("unreduced", "none") for label, *_ in rows) == sorted(records)
    for label, rate, low, high in rows:
        rec = records[label.strip("`").replace("unreduced", "none")]
        assert (int(rate), int(low), int(high)) == tuple(round(100 * rec[k]) for k in (
            "success_rate", "success_ci_low", "success_ci_high")), label


def test_the_bf16_speed_readme_figures_equal_their_files() -> None:
    """``metaworld/shipped/speed_bf16/README.md``: each table cell is its setting's end-to-end ratio in the folder's
    ``results.json`` (noisy or slower rows marked as the other speed READMEs mark them), the unreduced median is the
    file's, and every other ratio its prose quotes is a row of that file or of the float32 run it compares with
    (``speed_vision_keys/cpu-bench-oft``)."""
    import json

    shipped = RESULTS / "metaworld" / "shipped"
    folder = shipped / "speed_bf16"
    readme = " ".join((folder / "README.md").read_text().split())
    records = {r["setting"]: r for r in json.loads((folder / "results.json").read_text())["records"]}
    older = json.loads((shipped / "speed_vision_keys" / "cpu-bench-oft" / "results.json").read_text())["records"]
    assert f"Unreduced: {records['none']['predict_action_ms']:.1f} ms." in readme
    for setting, r in records.items():
        if setting == "none":
            continue
        cell = f"{r['predict_action_speedup']:.2f}x" + (" (noisy)" if r.get("noise_flag") else "") + \
            (" (slower)" if r["predict_action_speedup"] < 1 else "")
        assert f"| `{setting}` | {cell} |" in readme, (setting, cell)
    known = {f"{r['predict_action_speedup']:.2f}x" for r in [*records.values(), *older] if r.get("predict_action_speedup")}
    quoted = set(re.findall(r"\b\d+\.\d\dx", readme))
    assert quoted and quoted <= known, quoted - known


def test_a_page_shows_a_run_folder_outside_the_repository_as_out() -> None:
    """A recorded ``--output_dir`` outside the repository is shown as ``OUT`` with the committed file named; one inside
    it is shown as recorded."""
    from tools.report.cells import page_command

    shown = page_command("python x.py --settings a --output_dir /work/runs/tt/out --progress false", "eval_test.json")
    assert "/work/runs" not in shown and "--output_dir OUT --progress false" in shown and "`eval_test.json`" in shown
    inside = "python x.py --output_dir benchmarks/results/selection"
    assert page_command(inside, "eval_test.json") == f"`{inside}`"


@pytest.mark.parametrize("folder", ["val_merge", "eval_test_merge"])
def test_the_oft_policy_merge_readme_figures_equal_their_files(folder: str) -> None:
    """The OFT-style tabletop policy's `diverse_merge` READMEs: each row's first success cell (one decimal, with its
    Wilson interval) is its run's ``results.json``, row for row, every setting of the run tabulated."""
    import json

    run = RESULTS / "oft_policy" / folder
    records = {r["setting"]: r for r in json.loads((run / "results.json").read_text())["records"]}
    rows = re.findall(r"^\| (unreduced|`[^`]+`) \| (\d+\.\d) % \((\d+\.\d)-(\d+\.\d)\) \|", (run / "README.md").read_text(),
                      re.M)
    assert sorted(label.strip("`").replace("unreduced", "none") for label, *_ in rows) == sorted(records)
    for label, *cells in rows:
        rec = records[label.strip("`").replace("unreduced", "none")]
        assert tuple(cells) == tuple(f"{100 * rec[k]:.1f}" for k in ("success_rate", "success_ci_low",
                                                                      "success_ci_high")), label


def test_the_oft_policy_merge_prose_figures_equal_their_files() -> None:
    """The figures the OFT-style policy's `diverse_merge` runs put into prose (their READMEs, the policy's README, the
    usage and fine-tuning guides) are recomputed from the runs' files."""
    import json

    oft = RESULTS / "oft_policy"

    def runs(*names: str) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for name in names:  # the first run's record of a setting wins, as the report reads them
            for rec in json.loads((oft / name / "results.json").read_text())["records"]:
                out.setdefault(rec["setting"], rec)
        return out

    def pct(rec: dict, digits: int = 1) -> str:
        return f"{100 * rec['success_rate']:.{digits}f}"

    def text(path: Path) -> str:
        return " ".join(path.read_text().split())

    val = runs("val_merge")
    test, test5 = runs("eval_test_merge"), runs("eval_test_5obj_merge")
    div, div5 = runs("eval_test", "eval_test_cut_0.1", "eval_test_cut_0.05"), \
        runs("eval_test_5obj", "eval_test_5obj_cut_0.1", "eval_test_5obj_cut_0.05")
    keep01 = ["diverse:0.1", "vision:diverse:0.1@0.25", "vision:diverse:0.1@0.05"]
    merged01 = [s.replace("diverse", "diverse_merge") for s in keep01]
    # the validation README and the guides
    assert all(pct(val[s], 0) == "100" for s in merged01[:2]) and pct(val[merged01[2]], 0) == "99"
    lost = [100 * (val["none"]["success_rate"] - val[s]["success_rate"]) for s in keep01]
    steps = [val[s]["mean_steps"] for s in keep01]
    failed = [val[s]["episodes"] - val[s]["successes"] for s in keep01]
    timeouts = [val[s]["outcome_timeout"] for s in keep01]
    readme = text(oft / "val_merge" / "README.md")
    assert f"loses {min(lost):.1f} to {max(lost):.1f} points" in readme
    assert f"take {min(steps):.1f} to {max(steps):.1f} steps instead of {val['none']['mean_steps']:.1f}" in readme
    assert f"{sum(timeouts)} of its {sum(failed)} failures there are time-outs" in readme
    a, b = pct(val["diverse:0.1"]), pct(val["vision:diverse:0.1@0.25"])
    assert f"100 % of 200 at keep 0.1 at both sites against {a.removesuffix('.0')} and {b} %" in text(
        ROOT / "docs" / "guides" / "usage.md")
    assert f"against `diverse`'s {a} and {b} %" in text(oft / "README.md")
    # the test README, the policy's README and the fine-tuning guide
    reduced = [s for s in test if s != "none"]
    def worst(records: dict[str, dict], settings: list[str]) -> dict:
        return min((records[s] for s in settings), key=lambda r: r["success_rate"])

    def best(records: dict[str, dict], settings: list[str]) -> dict:
        return max((records[s] for s in settings), key=lambda r: r["success_rate"])

    assert f"{pct(worst(test, reduced))}-100 % of the 200 test episodes and {pct(worst(test5, reduced), 0)}-100 % of " \
           "the five-object scenes" in text(oft / "README.md")
    assert f"`diverse` falls to {pct(worst(div, keep01))}-{pct(best(div, keep01))} %" in text(oft / "README.md")
    drops = [100 * (runs_["none"]["success_rate"] - runs_[s]["success_rate"]) for runs_ in (div, div5) for s in keep01]
    readme = text(oft / "eval_test_merge" / "README.md")
    assert f"loses {min(drops):.1f} to {max(drops):.1f} points there" in readme
    last = merged01[2]
    assert f"training-free {pct(test[last])} % and {pct(test5[last], 0)} %" in readme
    assert f"`{last}` keeps {pct(test[last])} % of the same 200 test episodes and {pct(test5[last], 0)} % of the " \
           "five-object scenes" in text(ROOT / "docs" / "guides" / "finetuning.md")
    # the five-object column of the test README is its own run's
    rows = re.findall(r"^\| (unreduced|`[^`]+`) \| [^|]+ \| [^|]+ \| (\d+\.\d) % \(", (oft / "eval_test_merge" /
                                                                                      "README.md").read_text(), re.M)
    assert sorted(label.strip("`").replace("unreduced", "none") for label, _ in rows) == sorted(test5)
    for label, rate in rows:
        assert rate == pct(test5[label.strip("`").replace("unreduced", "none")]), label


def test_the_per_task_action_gap_readme_equals_its_files() -> None:
    """``metaworld/shipped/action_gap/per_task/README.md``: the gap table is ``gaps.json`` (every setting, the mean and
    each task's), the success table the test split's paired change a task (``table/results.json``), and reach, the
    task the prose names, has the smallest gap under every setting and the loss it states (here and on the page)."""
    import json

    folder = RESULTS / "metaworld" / "shipped" / "action_gap" / "per_task"
    gaps = json.loads((folder / "gaps.json").read_text())["settings"]
    table = {r["setting"]: r for r in json.loads((RESULTS / "metaworld" / "shipped" / "table" / "results.json")
                                                  .read_text())["records"]}
    tasks = list(gaps["none"]["by_group"])
    text = (folder / "README.md").read_text()
    gap_part, success_part = text.split("What each keep-0.5 setting costs")

    def rows_of(part: str) -> dict[str, list[str]]:
        return {m[0]: m[1].split(" | ") for m in re.findall(r"^\| `([^`]+)` \| (.+) \|$", part, re.M)}

    gap_rows, success_rows = rows_of(gap_part), rows_of(success_part)
    assert set(gap_rows) == set(gaps) - {"none"} and success_rows
    for setting, cells in gap_rows.items():
        f = gaps[setting]
        assert cells == [f"{f['l1_to_unreduced']:.4f}",
                         *(f"{f['by_group'][t]['l1_to_unreduced']:.4f}" for t in tasks)], setting
        assert min(tasks, key=lambda t: f["by_group"][t]["l1_to_unreduced"]) == "reach-v3", setting
    unreduced = table["none"]["tasks"]
    for setting, cells in success_rows.items():
        x = table[setting]["tasks"]
        mean = 100 * (table[setting]["successes"] - table["none"]["successes"]) / table["none"]["episodes"]
        assert cells == [f"{mean:+.1f}", *(
            f"{100 * (x[t]['successes'] - unreduced[t]['successes']) / unreduced[t]['episodes']:+.0f}" for t in tasks)]
    reach = unreduced["reach-v3"]["successes"] - table["diverse_merge:0.5"]["tasks"]["reach-v3"]["successes"]
    episodes = unreduced["reach-v3"]["episodes"]
    assert f"({reach} fewer of its {episodes} test episodes)" in " ".join(text.split())
    page = " ".join((RESULTS.parents[1] / "docs" / "results" / "metaworld.md").read_text().split())
    assert f"`diverse_merge:0.5` solves {reach} fewer of reach's {episodes} test episodes" in page


def test_the_keep_half_levers_and_reach_readmes_equal_their_files() -> None:
    """Issue 48's keep-0.5 runs of 2026-12-03: the successes `validation_projected_merge/` and
    `validation_camera_budget_merge/` tabulate, the episodes the two ways of merging agree on, and
    `reach_keep0.5/`'s table and counts (the changed outcomes, where they got, the paired shift of the closest
    approach) are recomputed from their journals and traces, as are the MetaWorld page's sentences of them."""
    import json
    import statistics

    shipped = RESULTS / "metaworld" / "shipped"
    page = " ".join((ROOT / "docs" / "results" / "metaworld.md").read_text().split())

    def outcomes(journal: Path) -> dict[tuple[str, str], dict[int, tuple[str, int]]]:
        lines = journal.read_text().splitlines()[1:]
        return {(r["setting"], r["task"]): {o["seed"]: (o["outcome"], o["steps"]) for o in r["outcomes"]}
                for r in map(json.loads, lines)}

    def wins(jobs: dict, setting: str) -> dict[str, int]:
        return {t: sum(o == "success" for o, _ in eps.values()) for (s, t), eps in jobs.items() if s == setting}

    plain = {**outcomes(shipped / "validation_merge_groups" / "hard_mean" / "episodes.jsonl"),
             **outcomes(shipped / "validation_projected_merge" / "before_projector_others" / "episodes.jsonl")}
    after = outcomes(shipped / "validation_projected_merge" / "after_projector" / "episodes.jsonl")
    unreduced, shipped_way, projected = (sum(wins(plain, "none").values()), sum(wins(plain, "diverse_merge:0.5").values()),
                                         sum(wins(after, "diverse_merge:0.5").values()))
    same = [(after[k][s][0] == plain[k][s][0], after[k][s] == plain[k][s]) for k in after if k[0] != "none" for s in after[k]]
    text = " ".join((shipped / "validation_projected_merge" / "README.md").read_text().split())
    assert f"| successes of 300 | {unreduced} | {shipped_way} | {projected} |" in text
    assert f"agree on {sum(a for a, _ in same)} of the {len(same)} outcomes ({sum(b for _, b in same)} to the step)" in text
    assert f"{projected} successes as the shipped way's {shipped_way}, {sum(a for a, _ in same)} of the 300" in page

    budgets = " ".join((shipped / "validation_camera_budget_merge" / "README.md").read_text().split())
    totals = []
    for folder in sorted((shipped / "validation_camera_budget_merge").glob("b*_*")):
        got = wins(outcomes(folder / "episodes.jsonl"), "diverse_merge:0.5")
        rest = sum(v for t, v in got.items() if t not in ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3"))
        row = (f"| {folder.name[1:].replace('_', ' / ')} (`{folder.name}/`) | {sum(got.values())} | {got['reach-v3']} | "
               f"{got['push-v3']} | {got['pick-place-v3']} | {got['door-open-v3']} | {rest} |")
        assert row in budgets, row
        assert wins(outcomes(folder / "episodes.jsonl"), "none") == wins(plain, "none")
        totals.append(sum(got.values()))
    assert f"| 0.5 / 0.5 (`diverse_merge:0.5`) | {shipped_way} |" in budgets
    assert f"{min(totals)}-{max(totals)} against the equal split's {shipped_way}" in page

    reach = shipped / "reach_keep0.5"

    def traced(name: str) -> dict[int, dict]:
        return {r["seed"]: r for r in json.loads((reach / name / "failures.json").read_text())["tasks"][0]["policy"]["rows"]}

    base = traced("none")
    readme = " ".join((reach / "README.md").read_text().split())
    near = [r for r in base.values() if r["outcome"] != "success" and r["to_goal_min"] < 0.0518]
    assert f"Of the unreduced policy's {sum(r['outcome'] != 'success' for r in base.values())} failures, {len(near)} came" \
           in readme
    assert f"| unreduced | {sum(r['outcome'] == 'success' for r in base.values())} |" in readme
    changed_counts = []
    for name, label in (("diverse_merge_0.5", "diverse_merge:0.5"), ("vision_diverse_merge_0.5_0.25",
                                                                    "vision:diverse_merge:0.5@0.25")):
        red = traced(name)
        changed = [s for s in sorted(base) if base[s]["outcome"] != red[s]["outcome"]]
        lost = sum(base[s]["outcome"] == "success" for s in changed)
        where = ", ".join(f"{100 * base[s]['to_goal_min']:.2f} -> {100 * red[s]['to_goal_min']:.2f}" for s in changed)
        shift = [1000 * (red[s]["to_goal_min"] - base[s]["to_goal_min"]) for s in base]
        se = statistics.stdev(shift) / len(shift) ** 0.5
        row = (f"| `{label}` | {sum(r['outcome'] == 'success' for r in red.values())} | {lost} / {len(changed) - lost} | "
               f"{where} | {statistics.mean(shift):+.2f} (standard error {se:.2f}) |")
        assert row in readme, row
        assert all(abs(red[s]["to_goal_min"] - 0.05) <= 0.0021 + 1e-9 for s in changed)
        changed_counts.append((lost, len(changed) - lost))
    (p_lost, _), (v_lost, v_won) = changed_counts
    assert f"the projector site lost {p_lost}, the vision site lost {v_lost} and won {v_won}" in page



def test_the_keep_half_thousand_episode_readme_equals_its_journal() -> None:
    """``metaworld/shipped/test_keep0.5_100/README.md``: each half's and the whole run's successes with their paired
    intervals, reach's changed episodes, and how many of the first half repeat the table step for step, recomputed
    from the journals; and the figures the MetaWorld page and the reach README give of it."""
    import json

    from prismatic_tr.eval.intervals import paired_difference_interval

    shipped = RESULTS / "metaworld" / "shipped"

    def outcomes(journal: Path) -> dict[tuple[str, str], dict[int, tuple[str, int]]]:
        return {(r["setting"], r["task"]): {o["seed"]: (o["outcome"], o["steps"]) for o in r["outcomes"]}
                for r in map(json.loads, journal.read_text().splitlines()[1:])}

    def points(x: float) -> str:
        text = f"{100 * x:+.1f}"
        return "0.0" if text in ("+0.0", "-0.0") else text

    run, table = outcomes(shipped / "test_keep0.5_100" / "episodes.jsonl"), outcomes(shipped / "table" / "episodes.jsonl")
    readme = " ".join((shipped / "test_keep0.5_100" / "README.md").read_text().split())
    page = " ".join((ROOT / "docs" / "results" / "metaworld.md").read_text().split())
    reach_readme = " ".join((shipped / "reach_keep0.5" / "README.md").read_text().split())
    halves = ((3_000_000, 3_000_050), (3_000_050, 3_000_100), (3_000_000, 3_000_100))
    tasks = [t for s, t in run if s == "none"]

    def cells(setting: str) -> tuple[list[str], tuple[int, int]]:
        out = []
        for low, high in halves:
            a = b = c = d = 0
            for task in tasks:
                for seed, (outcome, _) in run["none", task].items():
                    if low <= seed < high:
                        u, r = outcome == "success", run[setting, task][seed][0] == "success"
                        a, b, c, d = a + (u and r), b + (u and not r), c + (r and not u), d + (not u and not r)
            n = a + b + c + d
            diff, lo, hi = paired_difference_interval(a, c, b, d)
            out.append(f"{a + c}/{n}, {points(diff)} ({points(lo)} to {points(hi)})")
        reach = run["none", "reach-v3"], run[setting, "reach-v3"]
        lost = sum(o == "success" and reach[1][s][0] != "success" for s, (o, _) in reach[0].items())
        won = sum(o != "success" and reach[1][s][0] == "success" for s, (o, _) in reach[0].items())
        return out, (lost, won)

    unreduced = [sum(o == "success" for t in tasks for s, (o, _) in run["none", t].items() if lo <= s < hi)
                 for lo, hi in halves]
    reach_unreduced = sum(o == "success" for o, _ in run["none", "reach-v3"].values())
    assert (f"| unreduced | {unreduced[0]}/500 | {unreduced[1]}/500 | {unreduced[2]}/1000, "
            f"{unreduced[2] / 10:.1f} % | {reach_unreduced} |") in readme
    found = {}
    for setting in ("diverse_merge:0.5", "vision:diverse_merge:0.5@0.25"):
        (first, second, whole), (lost, won) = cells(setting)
        reach = sum(o == "success" for o, _ in run[setting, "reach-v3"].values())
        row = f"| `{setting}` | {first} | {second} | {whole} | {reach} (lost {lost}, won {won}) |"
        assert row in readme, row
        count, cost = whole.split(", ")
        diff, interval = cost.split(" (")
        assert count in page and re.search(rf"{re.escape(diff)}( points)? \((paired )?{re.escape(interval)}", page), whole
        found[setting] = (lost, won)
    assert f"{unreduced[2]}/1000 unreduced" in page
    (p_lost, p_won), (v_lost, v_won) = found["diverse_merge:0.5"], found["vision:diverse_merge:0.5@0.25"]
    assert p_won == 0 and v_lost == 0  # each site moves reach one way, as the prose says
    assert f"{p_lost} of the 100 reach episodes lost, none won; the vision site wins {v_won} there" in page
    assert f"{p_lost} lost and none won at the projector site, {v_won} won and none lost at the vision site" \
           in reach_readme
    repeated = [run[k][s] == table[k][s] for k in run for s in run[k] if s < 3_000_050]
    assert f"{sum(repeated):,} of its {len(repeated):,} episodes to the step, the other {len(repeated) - sum(repeated)}" \
           in readme


def journal_outcomes(*journals: Path) -> dict[tuple[str, str], dict[int, tuple[str, int]]]:
    """(setting, task) -> seed -> (outcome, steps), from MetaWorld run journals (``episodes.jsonl``), later ones
    adding jobs."""
    import json

    out: dict[tuple[str, str], dict[int, tuple[str, int]]] = {}
    for journal in journals:
        for r in map(json.loads, journal.read_text().splitlines()[1:]):
            out[r["setting"], r["task"]] = {o["seed"]: (o["outcome"], o["steps"]) for o in r["outcomes"]}
    return out


def paired_cell(run: dict, setting: str, unreduced: dict | None = None,
                seeds: tuple[int, int] = (0, 1 << 40)) -> tuple[int, int, str, int, int]:
    """Successes, episodes, the paired change against unreduced (``+0.4 (-0.8 to +1.6)``), lost and won, over the
    tasks ``unreduced`` (default: ``run``'s own ``none`` jobs) shares with ``run`` and the seeds in ``seeds``."""
    from prismatic_tr.eval.intervals import paired_difference_interval

    def points(x: float) -> str:
        text = f"{100 * x:+.1f}"
        return "0.0" if text in ("+0.0", "-0.0") else text

    base = unreduced if unreduced is not None else run
    a = b = c = d = 0
    for (s, task), episodes in base.items():
        if s != "none" or (setting, task) not in run:
            continue
        for seed, (outcome, _) in episodes.items():
            if seeds[0] <= seed < seeds[1]:
                u, r = outcome == "success", run[setting, task][seed][0] == "success"
                a, b, c, d = a + (u and r), b + (u and not r), c + (r and not u), d + (not u and not r)
    diff, lo, hi = paired_difference_interval(a, c, b, d)
    return a + c, a + b + c + d, f"{points(diff)} ({points(lo)} to {points(hi)})", b, c


def test_the_pair_merge_readmes_equal_their_journals() -> None:
    """``validation_pair_merge/README.md`` and ``test_pair_merge_100/README.md``: every success count, paired change and
    changed-outcome count recomputed from the journals; the experiment's patched runs and the plain ``pair_merge:0.5``
    give the same outcomes on the same seeds (validation's hard four, the table's test seeds)."""
    shipped = RESULTS / "metaworld" / "shipped"
    val = journal_outcomes(shipped / "validation_pair_merge" / "hard" / "episodes.jsonl",
                           shipped / "validation_pair_merge" / "others" / "episodes.jsonl")
    hard50 = journal_outcomes(shipped / "validation_hard50" / "episodes.jsonl")
    readme = " ".join((shipped / "validation_pair_merge" / "README.md").read_text().split())
    hard = ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3")

    def wins(run: dict, setting: str, tasks: tuple[str, ...] | None = None) -> list[int]:
        return [sum(o == "success" for o, _ in run[setting, t].values()) for t in tasks or ()]

    others = [t for s, t in val if s == "none" and t not in hard]
    n_u, n_p = (sum(wins(val, s, tuple(others))) for s in ("none", "diverse_merge:0.5"))
    wins_p, n, change, lost, won = paired_cell(val, "diverse_merge:0.5")
    assert n == 500
    assert (f"| unreduced | {wins_p - won + lost} | - | - | {' | '.join(map(str, wins(val, 'none', hard)))} | "
            f"{n_u} |") in readme
    assert (f"| `pair_merge:0.5` | {wins_p} | {change} | {lost} / {won} | "
            f"{' | '.join(map(str, wins(val, 'diverse_merge:0.5', hard)))} | {n_p} |") in readme
    _, _, _, c_lost, c_won = paired_cell(hard50, "diverse_merge:0.5")
    assert (f"| `diverse_merge:0.5` (the hard four only, `../validation_hard50/`) | - | - | {c_lost} / {c_won} | "
            f"{' | '.join(map(str, wins(hard50, 'diverse_merge:0.5', hard)))} | - |") in readme
    for task in hard:  # the patched run is the plain setting, episode for episode
        if ("pair_merge:0.5", task) in hard50:
            assert hard50["pair_merge:0.5", task] == val["diverse_merge:0.5", task], task

    test = journal_outcomes(shipped / "test_pair_merge_100" / "hard" / "episodes.jsonl",
                            shipped / "test_pair_merge_100" / "others" / "episodes.jsonl")
    cover = journal_outcomes(shipped / "test_keep0.5_100" / "episodes.jsonl")
    readme = " ".join((shipped / "test_pair_merge_100" / "README.md").read_text().split())
    halves = ((3_000_000, 3_000_050), (3_000_050, 3_000_100))
    vision = journal_outcomes(shipped / "test_pair_merge_100" / "vision" / "episodes.jsonl")
    for label, run, setting in (("`diverse_merge:0.5`", cover, "diverse_merge:0.5"),
                                ("`pair_merge:0.5`", test, "diverse_merge:0.5"),
                                ("`vision:diverse_merge:0.5@0.25`", cover, "vision:diverse_merge:0.5@0.25"),
                                ("`vision:pair_merge:0.5@0.25`", vision, "vision:pair_merge:0.5@0.25")):
        cells = []
        for seeds in halves:
            k, n, change, _, _ = paired_cell(run, setting, cover, seeds)
            cells.append(f"{k}/{n}, {change.split(' (')[0]}")
        k, n, change, lost, won = paired_cell(run, setting, cover)
        reach = sum(o == "success" for o, _ in run[setting, "reach-v3"].values())
        row = f"| {label} | {cells[0]} | {cells[1]} | {k}/{n}, {change} | {lost} / {won} | {reach} |"
        assert row in readme, row
    assert vision["none", "reach-v3"] == cover["none", "reach-v3"]  # the unreduced jobs are the same run's
    k, _, change, _, _ = paired_cell(vision, "vision:pair_merge:0.5@0.25", cover)
    assert f"solves {k} of the 1,000, {change.lstrip('-').split(' (')[0]} points under unreduced (paired {change.split(' (')[1].rstrip(')')}:" in readme
    unreduced = [paired_cell(cover, "none", cover, seeds)[0] for seeds in halves]
    assert f"| unreduced | {unreduced[0]}/500 | {unreduced[1]}/500 | {sum(unreduced)}/1000, " in readme
    for run, setting, words in ((test, "diverse_merge:0.5", "{} of the 1,000 episodes are the unreduced one step"),
                                (cover, "diverse_merge:0.5", "(the cover's groups: {})")):
        same = sum(run[setting, t][seed] == cover["none", t][seed] for s, t in cover if s == "none" for seed in cover[s, t])
        assert words.format(same) in readme
    table = journal_outcomes(shipped / "table" / "episodes.jsonl")
    for (s, task), episodes in table.items():  # the table's plain pair_merge:0.5 is the experiment's, on its seeds
        if s == "pair_merge:0.5":
            assert episodes == {seed: test["diverse_merge:0.5", task][seed] for seed in episodes}, task


def test_the_hard_four_validation_readme_equals_its_journal() -> None:
    """``validation_hard50/README.md``: every row (successes, paired change, changed outcomes, per task) recomputed from
    its journal, one row per setting the journal holds, and the prose's counts of changed outcomes."""
    folder = RESULTS / "metaworld" / "shipped" / "validation_hard50"
    run = journal_outcomes(folder / "episodes.jsonl")
    readme = " ".join((folder / "README.md").read_text().split())
    hard = ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3")
    settings = list(dict.fromkeys(s for s, _ in run))
    changed = {}
    for setting in settings:
        k, n, change, lost, won = paired_cell(run, setting)
        per_task = " | ".join(str(sum(o == "success" for o, _ in run[setting, t].values())) for t in hard)
        if setting == "none":
            row = f"| unreduced | {k} | - | - | {per_task} |"
        else:
            row = f"| `{setting}` | {k} | {change} | {lost} / {won} | {per_task} |"
        assert n == 200 and row in readme, row
        changed[setting] = lost + won
    assert (f"with {changed['pair_merge:0.5']} changed outcomes at each site where `diverse_merge` changed "
            f"{changed['diverse_merge:0.5']} (projector) and {changed['vision:diverse_merge:0.5@0.25']} (vision)") in readme
    assert changed["pair_merge:0.5"] == changed["vision:pair_merge:0.5@0.25"]


def test_the_pair_merge_speed_readme_equals_its_files() -> None:
    """``speed_pair_merge/README.md``: each ratio of its table is its run's end-to-end speed-up (marked slower under
    1), the unreduced step's median and spread, and the reducer's share of the towers' time on cpu-bench-oft."""
    import json

    folder = RESULTS / "metaworld" / "shipped" / "speed_pair_merge"
    readme = " ".join((folder / "README.md").read_text().split())
    policy = {r["setting"]: r for r in json.loads((folder / "policy" / "results.json").read_text())["records"]}
    bench = {r["setting"]: r for r in json.loads((folder / "cpu-bench-oft" / "results.json").read_text())["records"]}

    def ratio(x: float) -> str:
        return f"{x:.2f}x" + (" (slower)" if x < 1 else "")

    rows = [r for r in re.findall(r"\| `([^`]+)` \|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|", readme) if r[0] in policy]
    assert len(rows) == 12
    for setting, on_policy, on_bench in rows:
        assert on_policy.strip() == ratio(policy[setting]["predict_action_speedup"]), setting
        assert on_bench.strip() == (ratio(bench[setting]["predict_action_speedup"]) if setting in bench else ""), setting
    assert not any(r["noise_flag"] for r in bench.values())
    none = policy["none"]
    assert (f"Unreduced: {none['predict_action_ms']:.0f} ms (the policy; p10-p90 {none['predict_action_ms_p10']:.0f}-"
            f"{none['predict_action_ms_p90']:.0f} ms)") in readme
    for setting in ("pair_merge:0.5", "diverse_merge:0.5"):
        share = 100 * bench[setting]["reducer_ms"] / bench[setting]["vision_ms"]
        assert f"{share:.1f} % with `{setting}`" in readme or f"{share:.1f} % of the towers' time with `{setting}`" in readme


def test_the_metaworld_pages_pair_merge_figures_equal_their_files() -> None:
    """The figures docs/results/metaworld.md states of `pair_merge` in prose: validation's, the 1,000 test episodes',
    the table's costs against issue 48's bounds, the vision site's door-open at keep 0.1 and the speed ratios."""
    import json

    page = " ".join((ROOT / "docs" / "results" / "metaworld.md").read_text().split())
    shipped = RESULTS / "metaworld" / "shipped"
    val = journal_outcomes(shipped / "validation_pair_merge" / "hard" / "episodes.jsonl",
                           shipped / "validation_pair_merge" / "others" / "episodes.jsonl")
    k, _, _, lost, won = paired_cell(val, "diverse_merge:0.5")
    assert f"({k} of 500 episodes against {k - won + lost} unreduced" in page
    hard50 = journal_outcomes(shipped / "validation_hard50" / "episodes.jsonl")
    counts = [paired_cell(hard50, s)[0] for s in ("pair_merge:0.5", "vision:pair_merge:0.5@0.25", "none")]
    assert f"on the four hard tasks {counts[0]} and {counts[1]} of 200 at the projector and vision sites against {counts[2]}" in page
    test = journal_outcomes(shipped / "test_pair_merge_100" / "hard" / "episodes.jsonl",
                            shipped / "test_pair_merge_100" / "others" / "episodes.jsonl")
    cover = journal_outcomes(shipped / "test_keep0.5_100" / "episodes.jsonl")
    k, n, change, _, _ = paired_cell(test, "diverse_merge:0.5", cover)
    unreduced = paired_cell(cover, "none")[0]
    assert k == unreduced and f"{k}/{n}, as many as unreduced, {change.replace(' (', ' points (paired ')}" in page

    def reach(run: dict, setting: str) -> int:
        return sum(o == "success" for o, _ in run[setting, "reach-v3"].values())

    assert (f"reach {reach(test, 'diverse_merge:0.5')} of 100 as unreduced where the cover's groups gave "
            f"{reach(cover, 'diverse_merge:0.5')}") in page and reach(cover, "none") == reach(test, "diverse_merge:0.5")
    table = journal_outcomes(shipped / "table" / "episodes.jsonl")
    costs = {s: paired_cell(table, s)[2] for s in ("pair_merge:0.5", "vision:pair_merge:0.5@0.25", "pair_merge:0.25",
                                                   "vision:pair_merge:0.25@0.25")}
    plain = {s: c.lstrip("-") for s, c in costs.items()}
    assert (f"keep 0.5 costs {plain['pair_merge:0.5'].replace(' (', ' points (')} at the projector site and "
            f"{plain['vision:pair_merge:0.5@0.25']} at the vision site, within the 1-point bound, and keep 0.25 costs "
            f"{plain['pair_merge:0.25']} and {plain['vision:pair_merge:0.25@0.25']}, within 3") in page
    door = sum(o == "success" for o, _ in table["vision:pair_merge:0.1@0.25", "door-open-v3"].values())
    assert f"(door-open {door} of 50)" in page
    speed = {r["setting"]: r["predict_action_speedup"] for r in json.loads(
        (shipped / "speed_pair_merge" / "policy" / "results.json").read_text())["records"]}
    assert (f"`pair_merge:0.5` is {speed['pair_merge:0.5']:.2f}x against unreduced where `diverse_merge:0.5` is "
            f"{speed['diverse_merge:0.5']:.2f}x") in page


def test_the_metaworld_pages_vision_pair_merge_thousand_figure_equals_its_journal() -> None:
    """The page's figure of `vision:pair_merge:0.5@0.25` on the 1,000 test episodes is its journal's."""
    shipped = RESULTS / "metaworld" / "shipped"
    page = " ".join((ROOT / "docs" / "results" / "metaworld.md").read_text().split())
    cover = journal_outcomes(shipped / "test_keep0.5_100" / "episodes.jsonl")
    vision = journal_outcomes(shipped / "test_pair_merge_100" / "vision" / "episodes.jsonl")
    k, n, change, _, _ = paired_cell(vision, "vision:pair_merge:0.5@0.25", cover)
    cost, interval = change.lstrip("-").split(" (")
    assert f"`vision:pair_merge:0.5@0.25` {k}/{n}, {cost} points under, paired {interval}" in page
