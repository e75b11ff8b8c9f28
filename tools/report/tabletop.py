"""The OpenVLA-style tables: the README's headline, the main job's rows, the committed main run's page and the
tabletop policies' training runs."""

from __future__ import annotations

from typing import Any

from prismatic_tr.vla.settings import DEFAULT_METHODS
from tools.report.cells import (
    ADAPTER_MARK,
    NOISY,
    best_words,
    cores_of,
    cpu_words,
    cut_words,
    describe,
    dtype_speeds,
    end_to_end,
    episodes_of,
    headline_speed,
    keep,
    machine_words,
    page_command,
    paired_change,
    recomputed,
    success,
    success_exact,
    table_lines,
)
from tools.report.sources import MAIN_COMMAND, OFT_POLICY_DIR, RESULTS, TABLETOP_POLICIES, Sources

# ---------------------------------------------------------------- tables

def main_table(src: Sources) -> str:
    """docs/results/openvla.md: one row per main-job row, adapters after their setting."""
    meta, records = src.main["meta"], src.main["records"]
    n_test, n_val = episodes_of(records, "policy_episodes"), episodes_of(records, "validation_episodes")
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
    return "\n".join(table_lines(header, rows) + notes)


# The README's headline rows, in the default selection (prismatic_tr.vla.settings.DEFAULT_METHODS): (label,
# OpenVLA-style setting or adapter, OpenVLA-OFT-style setting or adapter); an adapter is named as "<setting> with
# <adapter>", None: not measured on that policy.
_P, _V = DEFAULT_METHODS["projector"], DEFAULT_METHODS["vision"]
HEADLINE_ROWS: tuple[tuple[str, str | None, str | None], ...] = (
    ("unreduced", "none", "none"),
    ("`projector` keep 0.25", f"{_P}:0.25", f"{_P}:0.25"),
    ("`projector` keep 0.1", f"{_P}:0.1", f"{_P}:0.1"),
    ("... with its shipped adapter", f"{_P}:0.1 with projector-{_P}-0.1", None),
    ("`vision` keep 0.25 after 1/4 of the towers", f"vision:{_V}:0.25@0.25", f"vision:{_V}:0.25@0.25"),
    ("`vision` keep 0.1 after 1/4 of the towers", f"vision:{_V}:0.1@0.25", f"vision:{_V}:0.1@0.25"),
    ("... with its shipped adapter", f"vision:{_V}:0.1@0.25 with vision-{_V}-0.1-0.25", None),
    ("`vision` keep 0.1 after 1/20 of the towers", None, f"vision:{_V}:0.1@0.05"),
    ("`llm` keep 0.5 after 1/4 of the layers", "llm:attention:0.5@0.25", "llm:attention:0.5@0.25"),
)


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
    n_oft = episodes_of(list(src.oft_policy["test"].values()), "episodes")

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
    header = [f"setting (`{_P}` selection, the default)", f"OpenVLA-style: end to end, cpu-bench, {dtype}",
              "OpenVLA-style: success, bundled policy, 100 test episodes",
              f"OpenVLA-OFT-style: end to end, cpu-bench-oft, {oft_dtype}",
              f"OpenVLA-OFT-style: success, bundled OFT policy, {n_oft} test episodes"]
    notes = ["", f"Speed: the whole `predict_action` at batch 1 against the unreduced model in the same interleaved run, "
             f"random weights at OpenVLA's tower sizes with a 1/16-size Llama. OpenVLA-style: "
             f"`{main_meta.get('command', MAIN_COMMAND)}`, {main_meta.get('date_utc', '?')[:10]}, {dtype}, "
             f"{machine_words(main_meta)}. OpenVLA-OFT-style (2 images, proprio, a chunk of 8 from one pass): "
             f"`{oft_run['meta'].get('command', '?')}`, {oft_run['meta'].get('date_utc', '?')[:10]}, {oft_dtype}, "
             f"{machine_words(oft_run['meta'])}. `{NOISY}`: the run flagged the row (its spread or the vision "
             f"gauge), so it is no result. {ADAPTER_MARK} merged LoRA: the setting's speed. Success: closed loop on "
             "the tabletop task's held-out test split (Wilson 95 %), small policies trained here "
             "(`benchmarks/results/selection/`, `benchmarks/results/oft_policy/`, adapters "
             "`benchmarks/results/finetune_reduced/`). Every row, float32 beside bfloat16: the results pages."]
    return "\n".join(table_lines(header, rows) + notes)


def policy_table(src: Sources) -> str:
    """benchmarks/results/policy/README.md: the run's facts and one row per record."""
    meta, records = src.main["meta"], src.main["records"]
    n_test, n_val = episodes_of(records, "policy_episodes"), episodes_of(records, "validation_episodes")
    load = (meta.get("machine", {}).get("load_average_at_start") or ["?"])[0]
    facts = [
        f"- Command: `{meta.get('command', MAIN_COMMAND)}`; {meta.get('date_utc', '?')} UTC; "
        f"{meta.get('wall_s', '?')} s wall time; {meta.get('noisy_rows', '?')} rows flagged noisy{recomputed(meta)}.",
        f"- Machine: {cpu_words(meta)}, {cores_of(meta) or '?'} cores, "
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
    rows = [[f"`{r['setting']}`", cut_words(r), str(r["llm_visual_tokens"]),
             f"{r['predict_action_ms']:.0f} ({r['predict_action_ms_p10']:.0f}-{r['predict_action_ms_p90']:.0f})",
             f"**{end_to_end(r)}**", f"{r['speedup']:.2f}x",
             f"{r['vision_ms']:.0f} / {r['prefill_ms']:.0f} / {r['decode_ms']:.0f}", success(r),
             success(r, "validation_"), "flagged" if r.get("noise_flag") else ""] for r in records]
    return "\n".join(facts + table_lines(header, rows))


def success_of(rec: dict[str, Any] | None) -> str:
    """``93.0 % of 200 (88.6-95.8 %)``; ``-`` when not measured."""
    if rec is None:
        return "-"
    return (f"{100 * rec['success_rate']:.1f} % of {rec['episodes']} ({100 * rec['success_ci_low']:.1f}-"
            f"{100 * rec['success_ci_high']:.1f} %)")


def minutes_of(record: dict[str, Any]) -> str:
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
        rows.append([label, success_of(val), success_of(test), success_of(five), minutes_of(rec),
                     str(rec.get("torch_threads") or "-"), f"`{path.relative_to(RESULTS).as_posix()}`"])
    header = ["policy, run", "validation", "test", "five-object test scenes", "minutes on 2 cores",
              "torch threads", "record (`benchmarks/results/`)"]
    notes = ["", "Validation: seeds 1,000,000 on (the split that chooses); test: seeds 3,000,000 on (reported only); "
             "Wilson 95 % intervals. Minutes: the record's stages summed (demonstrations, pretraining, training, "
             "choice, evaluation; run 2: its training). The shipped OpenVLA-style policy's test figures are the "
             "unreduced rows of `selection/eval_test.json` and `selection/eval_test_5obj.json`; the OFT-style one's "
             "five-object scenes are `oft_policy/eval_test_5obj/`."]
    return "\n".join(table_lines(header, rows) + notes)


def selection_test_table(src: Sources) -> str:
    """benchmarks/results/selection/README.md: every setting of ``selection/eval_test.json`` (the bundled policy,
    the same test seeds in every row): success with its Wilson interval, the change against unreduced on the same
    episodes with its paired interval, and the mean episode length."""
    none = src.test100["none"]
    rows = [["unreduced" if label == "none" else f"`{label}`", success(rec),
             "-" if label == "none" else paired_change({"tabletop": none}, {"tabletop": rec}), f"{rec['mean_steps']:.1f}"]
            for label, rec in src.test100.items()]
    first, last = none.get("seeds") or ("?", "?")
    header = ["setting", f"success, {none['episodes']} test episodes", "against unreduced, points (paired 95 %)",
              "mean steps"]
    notes = ["", f"Test seeds {first:,}-{last:,} (read by no decision), every row on the same episodes. Against "
             "unreduced: the row's success minus the unreduced policy's, with the 95 % interval of a difference on "
             "paired episodes (Newcombe's method 10): one that holds 0 is a cost these episodes cannot tell from none. "
             f"{page_command(src.test100_meta['command'], 'eval_test.json')}, "
             f"{src.test100_meta['date_utc'][:10]}."]
    return "\n".join(table_lines(header, rows) + notes)
