"""The OpenVLA-OFT tables (``docs/results/openvla-oft.md`` and the main job's OFT rows)."""

from __future__ import annotations

from typing import Any

from tools.report.cells import (
    ADAPTER_MARK,
    cpu_words,
    describe,
    end_to_end,
    episodes_of,
    keep,
    recomputed,
    success_exact,
    table_lines,
)
from tools.report.sources import Sources


def main_oft_rows(src: Sources) -> str:
    """docs/results/openvla-oft.md, first: the same for OpenVLA-OFT. Speed of every setting timed on cpu-bench-oft in
    both dtypes (benchmarks/results/oft) beside the success of the bundled OFT-style policy under it, shipped OFT
    adapters after their setting."""
    f32, bf16 = ({r["setting"]: r for r in src.oft[d]["records"]} for d in ("float32", "bfloat16"))
    header = ["where the tokens are cut, which (OpenVLA-OFT)", "keep",
              "end to end on cpu-bench-oft, float32 / bfloat16",
              f"bundled OFT policy, {episodes_of(list(src.oft_policy['test'].values()), 'episodes')} test episodes",
              f"{episodes_of(list(src.oft_policy['test_5obj'].values()), 'episodes')} five-object test scenes"]

    def speeds(label: str) -> str:
        rows = [by.get(label) for by in (f32, bf16)]
        return "-" if None in rows else " / ".join(
            f"{r['predict_action_speedup']:.2f}" + ("*" if r.get("noise_flag") else "") for r in rows) + "x"

    rows = []
    for rec in settings_in_order(src.oft):
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
    return "\n".join(table_lines(header, rows) + notes)


def settings_in_order(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per setting timed by any of ``runs`` (dtype -> results): the first run's in its order, then each
    later run's settings the ones before it lack (a run that timed more settings adds rows)."""
    seen: dict[str, dict[str, Any]] = {}
    for run in runs.values():
        for rec in run["records"]:
            seen.setdefault(rec["setting"], rec)
    return list(seen.values())


def oft_rows(runs: dict[str, dict[str, Any]]) -> str:
    """OpenVLA-OFT rows of one or more runs (dtype -> results), settings in the first run's order (then any only a
    later run timed): per dtype the end-to-end speedup and ``predict_action`` ms, where the step's time goes
    (vision / the one pass / head) and the process's peak memory."""
    first = settings_in_order(runs)
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
    return "\n".join(table_lines(header, rows) + ["", *facts])


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


def oft_batch4_table(src: Sources) -> str:
    """docs/results/openvla-oft.md, batched serving: cpu-bench-oft with 4 observations a step, both dtypes."""
    return oft_rows(src.oft_batch4)


def oft_avx2_table(src: Sources) -> str:
    """docs/results/openvla-oft.md, another CPU: cpu-bench-oft in float32 on an AVX2-only machine."""
    return oft_rows(src.oft_avx2)
