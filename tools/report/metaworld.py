"""The MetaWorld MT10 tables: the policy's recipe runs, its reduction table and fine-tunes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prismatic_tr.policy.checkpoint_choice import LAST
from prismatic_tr.policy.metaworld import TABLE_SETTINGS
from tools.report.cells import ADAPTER_MARK, cpu_words, paired_change, pct, speedup, table_lines
from tools.report.sources import METAWORLD_RUNS, Sources


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
    return "\n".join(table_lines(header, rows))


def metaworld_table(src: Sources) -> str:
    """docs/results/metaworld.md: the reduction table, per policy (``METAWORLD_TABLE_SETS``, newest first): one row
    per setting (success per task, mean, end to end), then a row per fine-tune of that policy (its folder's
    ``finetune_*``: the recipe's test under its setting; the speed is the training-free row's, marked)."""
    from prismatic_tr.eval.intervals import wilson_interval

    sets = {label: runs for label, runs in src.metaworld_tables.items() if runs}
    if not sets:
        return ("Not measured yet: `python vla_scripts/eval_metaworld.py --output_dir benchmarks/results/metaworld/shipped/"
                "table` (the shipped policy, every setting on the same 50 test episodes a task; a cut-off run resumes) "
                "writes it.")
    order = {label: i for i, label in enumerate(TABLE_SETTINGS)}   # a policy's rows in the table's order
    runs = [(policy, run["meta"].get("trained_with") or "none", r) for policy, tables in sets.items()
            for i, run in enumerate(tables) for r in run["records"] if i == 0 or r["setting"] != "none"]
    runs.sort(key=lambda x: (list(sets).index(x[0]), order.get(x[2]["setting"], len(order))))
    tasks = list(runs[0][2]["tasks"])
    header = ["Setting", "Model", "Visual tokens", *(t.removesuffix("-v3") for t in tasks), "Mean",
              "Against unreduced, points (paired 95 %)", "End to end"]

    def tokens(r: dict[str, Any]) -> str:
        kept = r.get("llm_visual_tokens", r["num_patches"])
        return str(r["num_patches"]) + (f" -> {kept} in the LLM" if kept != r["num_patches"] else "")

    def model(policy: str, trained_with: str) -> str:
        return policy if trained_with == "none" else f"{policy}, fine-tuned with `{trained_with}`"

    def speed(r: dict[str, Any]) -> str:
        return speedup(r["predict_action_speedup"]) if r.get("predict_action_speedup") else "-"

    def mean(wins: int, episodes: int) -> str:
        low, high = wilson_interval(wins, episodes)
        return f"{wins}/{episodes}, **{100 * wins / episodes:.1f} %** ({100 * low:.0f}-{100 * high:.0f} %)"

    rows, finetuned = [], 0
    for policy in sets:
        unreduced = next(r["tasks"] for p, m, r in runs if p == policy and r["setting"] == "none")
        rows += [[f"`{r['setting']}`", model(p, m), tokens(r), *(pct(r["tasks"][t]["success_rate"]) for t in tasks),
                  mean(r["successes"], r["episodes"]),
                  "-" if r["setting"] == "none" else paired_change(unreduced, r["tasks"]), speed(r)]
                 for p, m, r in runs if p == policy]
        training_free = {r["setting"]: r for p, m, r in runs if m == "none" and p == policy}
        for f in src.metaworld_finetunes.get(policy, []):
            test, base = f["evaluation"]["test"], training_free.get(f["setting"])
            rows.append([f"`{f['setting']}`", f"{policy}, fine-tuned with it: {_finetune_words(f)}{_shipped(src, f)}",
                         tokens(base) if base else "-", *(pct(test["tasks"][t]["success_rate"]) for t in tasks),
                         mean(sum(test["tasks"][t]["successes"] for t in tasks),
                              sum(test["tasks"][t]["episodes"] for t in tasks)),
                         paired_change(unreduced, test["tasks"]), speed(base) + ADAPTER_MARK if base else "-"])
            finetuned += 1
    notes = ["Mean: successes pooled over the tasks (Wilson 95 %). Against unreduced: the row's success minus the same "
             "policy's unreduced success on the same episodes, in percentage points, with the 95 % interval of a "
             "difference measured on paired episodes (Newcombe's method 10, "
             "`prismatic_tr.eval.intervals.paired_difference_interval`): an interval that holds 0 is a cost the "
             "500 episodes cannot tell from none."]
    for policy, tables in sets.items():
        meta = tables[0]["meta"]
        timed = meta["config"]["timing_runs"]
        how = (f"end to end: the whole `predict_action` at batch 1 in {meta['dtype']}, the median of {timed} "
               "interleaved runs against the unreduced one" if timed else
               "not timed (`--timing_runs 0`: the same shapes as the other policy's rows, whose speed holds)")
        notes.append(f"{policy[0].upper() + policy[1:]}: `{meta['command']}` on {cpu_words(meta)} with "
                     f"{meta['machine']['cores']} cores (torch {meta['torch_version']}), {meta['date_utc'][:16]} UTC; "
                     f"{how}.")
    if finetuned:
        notes.append(f"{ADAPTER_MARK} the training-free row's speed: fine-tuning changes the weights, not the shapes.")
    return "\n".join(table_lines(header, rows) + [""] + "\n\n".join(notes).splitlines())


SHIPPED = "the shipped policy"  # its key in METAWORLD_TABLE_SETS
# the README's MetaWorld rows: (label, the `diverse_merge` setting (the default), the `diverse` one (the default in
# 0.5.0); a setting's shipped adapter follows its row
METAWORLD_HEADLINE_ROWS = (
    ("unreduced", "none", "none"),
    ("`projector` keep 0.5", "diverse_merge:0.5", "diverse:0.5"),
    ("`projector` keep 0.25", "diverse_merge:0.25", "diverse:0.25"),
    ("`projector` keep 0.1", "diverse_merge:0.1", "diverse:0.1"),
    ("`vision` keep 0.5 after 1/4 of the towers", "vision:diverse_merge:0.5@0.25", "vision:diverse:0.5@0.25"),
    ("`vision` keep 0.25 after 1/4 of the towers", "vision:diverse_merge:0.25@0.25", "vision:diverse:0.25@0.25"),
    ("`vision` keep 0.1 after 1/4 of the towers", "vision:diverse_merge:0.1@0.25", "vision:diverse:0.1@0.25"),
)
# a `diverse_merge` setting's variants tested on the same episodes, on the rows after it (issue 48): the groups grown
# from the most alike pairs at keep 0.5, the keep it was chosen for (every keep: docs/results/metaworld.md), and the
# vision site's cover on the next block's keys
PAIRS_LABEL = "... with its groups grown from the most alike pairs, `pair_merge`"
KEYS_LABEL = "... with its cover on the next block's keys, `diverse_merge_keys`"
METAWORLD_HEADLINE_VARIANTS: dict[str, tuple[tuple[str, str], ...]] = {
    "diverse_merge:0.5": (("pair_merge:0.5", PAIRS_LABEL),),
    "vision:diverse_merge:0.5@0.25": (("vision:pair_merge:0.5@0.25", PAIRS_LABEL),
                                      ("vision:diverse_merge_keys:0.5@0.25", KEYS_LABEL)),
    **{f"vision:diverse_merge:{k}@0.25": ((f"vision:diverse_merge_keys:{k}@0.25", KEYS_LABEL),) for k in ("0.25", "0.1")},
}


def metaworld_headline_table(src: Sources) -> str:
    """README.md: MetaWorld MT10 on the shipped policy, `diverse_merge` (the default) beside `diverse` at each site
    and keep: test success (500 episodes), its paired change against unreduced, and the end-to-end speed-up of the
    shipped policy's step (``METAWORLD_SPEED``); each setting's shipped adapter on the row after it, then its variant
    (``METAWORLD_HEADLINE_VARIANTS``) where that was tested."""
    from prismatic_tr.eval.intervals import wilson_interval

    tables = src.metaworld_tables[SHIPPED]
    tested = {r["setting"]: r for run in reversed(tables) for r in run["records"]}  # the first run's "none" wins
    unreduced = tested["none"]["tasks"]
    speeds = {r["setting"]: r for run in reversed(src.metaworld_speed) for r in run["records"]}
    adapters = {f["setting"]: f for f in src.metaworld_finetunes.get(SHIPPED, []) if _shipped(src, f)}

    def mean(tasks: dict[str, dict[str, Any]]) -> str:
        wins, episodes = sum(t["successes"] for t in tasks.values()), sum(t["episodes"] for t in tasks.values())
        low, high = wilson_interval(wins, episodes)
        return f"{100 * wins / episodes:.1f} % ({100 * low:.0f}-{100 * high:.0f} %)"

    def cells(setting: str, tasks: dict[str, dict[str, Any]] | None, mark: str = "") -> list[str]:
        if tasks is None:
            return ["-", "-", "-"]
        rec = speeds.get(setting)
        speed = speedup(rec["predict_action_speedup"]) + mark if rec and rec.get("predict_action_speedup") else "-"
        return [mean(tasks), "-" if setting == "none" else paired_change(unreduced, tasks), speed]

    rows = []
    for label, merge, default in METAWORLD_HEADLINE_ROWS:
        rows.append([label, *cells(merge, tested[merge]["tasks"]), *cells(default, tested[default]["tasks"])])
        if merge in adapters:
            f = adapters[merge]
            rows.append([f"... with its shipped adapter{_shipped(src, f).removeprefix(', shipped as')}",
                         *cells(merge, f["evaluation"]["test"]["tasks"], ADAPTER_MARK), "-", "-", "-"])
        for variant, label in METAWORLD_HEADLINE_VARIANTS.get(merge, ()):
            if variant in tested:
                rows.append([label, *cells(variant, tested[variant]["tasks"]), "-", "-", "-"])
    header = ["setting", "`diverse_merge` (the default): success", "against unreduced, points (paired 95 %)",
              "end to end", "`diverse`: success", "against unreduced, points (paired 95 %)", "end to end"]
    table_meta = tables[0]["meta"]
    timed = src.metaworld_speed[0]["meta"]
    by_cpu: dict[str, list[str]] = {}   # each machine once, with the days it was timed on
    for r in src.metaworld_speed:
        days = by_cpu.setdefault(f"{cpu_words(r['meta'])} with {r['meta']['machine']['cores']} cores", [])
        days += [] if r["meta"]["date_utc"][:10] in days else [r["meta"]["date_utc"][:10]]
    machines = " and ".join(f"{cpu}, {' and '.join(days)}" for cpu, days in by_cpu.items())
    notes = ["", "Success: the shipped MetaWorld policy (OpenVLA-OFT style, trained here: "
             "`prismatic_tr/assets/metaworld_policy`) on MetaWorld v3's MT10, closed loop, "
             f"{table_meta['episodes_per_task']} held-out test episodes a task, {len(unreduced)} tasks "
             f"(Wilson 95 %): `{table_meta['command']}`. Against unreduced: the difference on the same episodes with "
             "its paired 95 % interval (one that holds 0 is a cost the episodes cannot tell from none). The adapters' "
             "rows: each one's own recipe tested it on the same episodes (`train_metaworld_policy.py`, its record in "
             "`benchmarks/results/metaworld/shipped/finetune_*/`). End to end: the policy's whole `predict_action` at "
             f"batch 1 in {timed['dtype']}, the median of {timed['config']['timing_runs']} runs interleaved with the "
             f"unreduced one, on {machines} "
             "(`benchmarks/results/metaworld/shipped/speed_merge/`, `speed_vision_merge/`, `speed_vision_keys/`, "
             "`speed_pair_merge/`: "
             "each site's run with its own unreduced step; the step is tens of milliseconds and its runs spread "
             "widely, so ratios a few hundredths apart are the same, and the small policy's ratios are not "
             f"OpenVLA's). {ADAPTER_MARK} merged LoRA: the setting's speed. Every "
             "setting, task and policy: [docs/results/metaworld.md](docs/results/metaworld.md)."]
    return "\n".join(table_lines(header, rows) + notes)


def _shipped(src: Sources, record: dict[str, Any]) -> str:
    """``, shipped as `name``` when a shipped adapter was made from this fine-tune's chosen checkpoint, else ""."""
    name = src.shipped_adapters.get(record["selection"].get("chosen", ""))
    return f", shipped as `{name}`" if name else ""


def _finetune_words(record: dict[str, Any]) -> str:
    """``600 steps on on-policy episodes (40 a task), step 400 chosen on validation``: how a fine-tune was made."""
    sel, config = record["selection"], record["config"]
    if sel.get("rule") == LAST:
        choice = "the last step's checkpoint (no choice)"
    else:
        chosen = next(c["step"] for c in sel["candidates"] if c["checkpoint"] == sel["chosen"])
        choice = f"step {chosen} chosen on validation"
    if not config.get("onpolicy_episodes"):
        data = "the expert's demonstrations"
    elif _second_round(config):
        data = (f"on-policy episodes of the first round's fine-tune ({config['onpolicy_episodes']} a task), labelled by the "
                "policy unreduced: a second round from it")
    else:
        data = f"on-policy episodes ({config['onpolicy_episodes']} a task, labelled by the policy unreduced)"
    earlier = _aggregated(record)
    if earlier:
        data += f", with the first round's ({earlier}) aggregated"
    lora = f"a LoRA adapter (rank {config['lora_rank']}), " if config.get("lora_rank") else ""
    seed = f" from seed {config['seed']}" if config.get("seed") else ""
    return f"{lora}{config['max_steps']} steps{seed} on {data}, {choice}"


def _aggregated(record: dict[str, Any]) -> str:
    """``40 a task``: the earlier on-policy rounds a fine-tune trained beside its own (``--onpolicy_aggregate``)."""
    return " + ".join(f"{a['job']['episodes_per_task']} a task" for a in record.get("aggregated") or [])


def _second_round(config: dict[str, Any]) -> bool:
    """A fine-tune whose on-policy episodes another policy labelled than the one that drove them."""
    teacher = config.get("onpolicy_teacher")
    return bool(teacher) and teacher != config.get("init_oft")


def _mw_validation(record: dict[str, Any] | None, partial: Sequence[dict[str, Any]]) -> str:
    """``step 1000: 15 %, step 2000: 38 %``: validation success at each checkpoint, from the partial runs first,
    then the recipe's choice (the chosen step in bold)."""
    points: dict[int, tuple[int, int]] = {}
    for run in partial:
        step = int(run["meta"]["model"].rstrip("/").rsplit("_", 1)[-1])
        rec = next(r for r in run["records"] if r["setting"] == "none")
        points[step] = (rec["successes"], rec["episodes"])
    chosen = None
    if record is not None and record["selection"].get("rule") == LAST:
        return "- (the last step's checkpoint, not chosen)"
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
    data = m.get("demonstrations", 0)
    return (f"{data:.0f} / " if data >= 0.5 else "- / ") + \
        f"{m['training']:.0f} / {m['selection']:.0f} / {m['evaluation_test']:.0f}"


def metaworld_runs_table(src: Sources) -> str:
    """docs/guides/metaworld.md: every run of the MetaWorld recipe (``METAWORLD_RUNS``, then the fine-tunes):
    validation success at its checkpoints (10 episodes a task), its test (50 a task) and its minutes."""
    rows = [[label, _mw_validation(rec, parts), _mw_test(rec), _mw_minutes(rec),
             (rec or parts[0]["meta"])["machine"]["cpu"]["model"] if (rec or parts[0]["meta"]).get("machine") else "-"]
            for (label, _, _), (rec, parts) in zip(METAWORLD_RUNS, src.metaworld_runs, strict=True)]
    rows += [[f"fine-tuned with `{f['setting']}` from {policy}"
              + (f", on-policy ({f['config']['onpolicy_episodes']} episodes a task"
                 + (", second round" if _second_round(f["config"]) else "")
                 + (f", {_aggregated(f)} of the first aggregated" if _aggregated(f) else "") + ")"
                 if f["config"].get("onpolicy_episodes") else "")
              + (f", LoRA rank {f['config']['lora_rank']}" if f["config"].get("lora_rank") else "")
              + f", {f['config']['max_steps']} steps" + (f", seed {f['config']['seed']}" if f["config"].get("seed") else "")
              + _shipped(src, f),
              _mw_validation(f, ()), _mw_test(f), _mw_minutes(f), f.get("machine", {}).get("cpu", {}).get("model", "-")]
             for policy, finetunes in src.metaworld_finetunes.items() for f in finetunes]
    header = ["run", "validation success by checkpoint step (chosen in bold)", "test, all tasks",
              "minutes: data / training / choosing / testing", "CPU"]
    notes = ["", "Validation: 10 episodes a task (100 in all), the split that chooses; a run's first checkpoints "
             "without a recipe record were evaluated by `eval_metaworld.py --split validation --episodes 10` "
             "(`benchmarks/results/metaworld/policy7*_partial/validation_step*.json`). Test: 50 episodes a task on "
             "held-out goals. Data: writing the demonstrations, or the on-policy episodes (-: written before this "
             "invocation, by `make_metaworld_demos.py` or by a cut-off earlier run of the command). Records: `benchmarks/results/metaworld/`, the shipped policy's "
             "`prismatic_tr/assets/metaworld_policy/evaluation.json`."]
    return "\n".join(table_lines(header, rows) + notes)


def metaworld_recall_table(src: Sources) -> str:
    """docs/results/metaworld.md: which patches each selection keeps, per camera, pooled over the tasks
    (``metaworld/recall/recall.json``, ``benchmarks/metaworld_recall.py``)."""
    from prismatic_tr.bench.vla.metaworld_recall import attention_markdown, markdown

    rec = src.metaworld_recall
    if rec is None:
        return "Not measured yet: `python benchmarks/metaworld_recall.py` writes `benchmarks/results/metaworld/recall/`."
    attention = []
    if rec.get("attention"):
        attention = ["", "What the unreduced policy reads there: of the action slots' attention on the visual tokens "
                     "(mean over layers, heads and the positions the head reads), the share on each camera and on "
                     "each label's patches, against the share of the visual tokens the label covers (area):", "",
                     attention_markdown(rec["attention"])]
    notes = ["", f"Recall: of the patches that show the label (at least one pixel of it, from a segmentation render), "
             f"the share the setting passes to the projector, pooled over {len({r['task'] for r in rec['rows']})} "
             f"tasks x {rec['episodes_per_task']} {rec['split']} seeds x 2 observations ({rec['observations']}); "
             "tokens kept: per camera and observation, of 256. "
             f"`{rec['command']}`, the policy `{rec['vla_path']}`, {rec['dtype']}; every task's rows in the JSON."]
    return markdown(rec) + "\n" + "\n".join(notes + attention)
