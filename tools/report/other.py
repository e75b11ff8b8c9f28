"""The tables of the GPU runs, the server's load tests, the exact savings and the README's two commands' times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.report.cells import cores_of, cpu_words, end_to_end, recomputed, table_lines
from tools.report.sources import GPU_CAPTURED, GPU_RUN, Sources


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
             f"{cpu_words(meta)} with {cores_of(meta)} cores (torch {meta['versions']['torch']}, transformers {meta['versions']['transformers']}), "
             f"{meta['date_utc'][:16]} UTC; {meta['config']['num_runs']} interleaved rounds after "
             f"{meta['config']['warmup']} warm-up; `*`: the row is flagged noisy (spread or phase drift), not a result{recomputed(meta)}; "
             f"results in `{GPU_RUN.as_posix()}/`."]
    return "\n".join(table_lines(header, rows) + facts)


def _captured_machine(by_model: dict[str, dict[int, dict[str, Any]]], folder: Path) -> str:
    """Where and how a captured run was measured, from its first file; its command as run, its files' folder."""
    first = next(iter(next(iter(by_model.values())).values()))
    meta, job = first["meta"], first["meta"]["job"]
    peaks = meta["peaks"]
    sheet = peaks.get("datasheet") or {}
    args = meta["command"].split()
    after = args[args.index("--output_dir") + 2:] if "--output_dir" in args else []  # the run's own flags
    command = " ".join(["bash benchmarks/gpu/device_check.sh OUT", *after])
    return (f"Measured by `{command}` (`python benchmarks/gpu/captured.py`) on "
            f"{meta['machine']['gpu']} (measured {peaks['bandwidth_gb_s'] / 1000:.2f} TB/s copy and "
            f"{peaks['bf16_tflop_s']:.0f} TFLOP/s bf16 matrix product; datasheet {sheet.get('bandwidth_gb_s', 0) / 1000:.2f} TB/s, "
            f"{sheet.get('bf16_tflop_s', 0):.0f} TFLOP/s), torch {meta['versions']['torch']}, transformers "
            f"{meta['versions']['transformers']}, {meta['date_utc'][:16]} UTC; RANDOM weights at the 7B sizes, bfloat16; "
            f"{job['num_runs']} interleaved rounds after {job['warmup']} warm-up; results in `{folder.as_posix()}/`")


def _x(row: dict[str, Any], mode: str) -> str:
    """``1.77x`` against the same mode's unreduced row; ``*`` when the mode's spread flags it."""
    slower = " (slower)" if round(row[f"{mode}_speedup"], 2) < 1 else ""
    return f"{row[f'{mode}_speedup']:.2f}x{slower}{'*' if row[f'{mode}_noise_flag'] else ''}"


def gpu_headline_table(src: Sources) -> str:
    """README.md, On a GPU: per 7B-size model and batch, eager and captured unreduced, and the fastest captured
    setting against captured unreduced (gpu_captured files)."""
    rows = []
    for model, by_batch in src.gpu_captured.items():
        for batch, data in by_batch.items():
            base, *reduced = data["rows"]
            best = max(reduced, key=lambda r: r["captured_speedup"])
            rows.append([f"{model}, batch {batch}", f"{base['eager_ms']:.1f} ms", f"{base['captured_ms']:.1f} ms",
                         f"{base['captured_vs_roofline']:.2f}x", f"`{best['setting']}`",
                         f"{best['captured_ms']:.1f} ms, {_x(best, 'captured')}"])
    header = ["model, batch", "eager, unreduced", "CUDA graph, unreduced", "... over its roofline",
              "fastest setting", "its CUDA graph, against CUDA-graph unreduced"]
    machine = _captured_machine(src.gpu_captured, GPU_CAPTURED)
    return "\n".join(table_lines(header, rows) + ["", machine + ". Every setting and the roofline: "
                                                       "[docs/results/gpu.md](docs/results/gpu.md)."])


def _captured_rows(by_model: dict[str, dict[int, dict[str, Any]]]) -> list[list[str]]:
    """One line per model, batch and setting of a captured run: eager and captured, against that mode's unreduced."""
    rows = []
    for model, by_batch in by_model.items():
        for batch, data in by_batch.items():
            for r in data["rows"]:
                decode = f"{r['decode_share']:.2f}" if "decode_share" in r else "-"
                same = "equal" if r["captured_equal"] else f"max diff {r['captured_max_abs_diff']:.3f}"
                rows.append([f"{model}, batch {batch}", f"`{r['setting']}`", str(r["llm_visual_tokens"]),
                             f"{r['eager_ms']:.1f} ms, {_x(r, 'eager')}",
                             f"{r['captured_ms']:.1f} ms, {_x(r, 'captured')}", f"{r['capture_gain']:.2f}x",
                             f"{r['roofline_ms']:.1f} ms", f"{r['captured_vs_roofline']:.2f}x", decode, same])
    return rows


CAPTURED_HEADER = ["model, batch", "setting", "visual tokens", "eager", "CUDA graph", "graph over eager",
                   "roofline", "graph over roofline", "decode share", "graph's actions vs eager's"]
CAPTURED_KEY = ("Speed-ups are against the same mode's unreduced row; `*`: that mode's p90/p10 (the row's or the "
                "unreduced row's) exceeds 1.20, not a result. Decode share: 1 - the prefill-only graph's time over the "
                "whole step's (OpenVLA).")


def gpu_captured_table(src: Sources) -> str:
    """docs/results/gpu.md: every setting, eager and captured, at batch 1 and 8 on both 7B-size models."""
    return "\n".join(table_lines(CAPTURED_HEADER, _captured_rows(src.gpu_captured)) + [
        "", _captured_machine(src.gpu_captured, GPU_CAPTURED) + ". " + CAPTURED_KEY])


def gpu_merge_table(src: Sources) -> str:
    """docs/results/gpu.md: ``diverse_merge`` (merging, with proportional attention) beside ``diverse`` at the same
    keeps, eager and captured, one table per run (the projector site's, then the vision site's)."""
    parts = []
    for run, by_model in src.gpu_merge.items():
        parts += [*table_lines(CAPTURED_HEADER, _captured_rows(by_model)), "",
                  _captured_machine(by_model, run) + ". " + CAPTURED_KEY, ""]
    return "\n".join(parts[:-1])


def gpu_kernels_table(src: Sources) -> str:
    """docs/results/gpu.md: where the GPU time of a batch-1 step goes, per kind of kernel (kernel profiles)."""
    rows = []
    for model, data in src.gpu_profile.items():
        captured = {r["setting"]: r for r in src.gpu_captured[model][1]["rows"]}
        for r in data["rows"]:
            kinds = r["by_kind_ms"]
            rows.append([model, f"`{r['setting']}`", f"{captured[r['setting']]['captured_ms']:.1f} ms",
                         f"{r['kernel_ms']:.1f} ms", f"{r['kernels']:.0f}",
                         *(f"{kinds.get(k, 0.0):.1f} ms" for k in ("gemm", "elementwise", "reduce", "attention")),
                         f"{captured[r['setting']]['roofline_ms']:.1f} ms"])
    meta = next(iter(src.gpu_profile.values()))
    header = ["model (batch 1)", "setting", "CUDA graph", "kernels' sum", "launches", "matrix products",
              "elementwise", "reductions", "attention", "roofline"]
    return "\n".join(table_lines(header, rows) + [
        "", f"Kernels of eager steps under `torch.profiler` (`python benchmarks/gpu/kernel_profile.py`, 3 steps, per "
        f"step; {meta['machine']['gpu']}, the same lease as the run above), "
        f"recounted by `{meta['recounted']}` (the first version counted the phase ranges among the kernels); files in "
        f"`{(GPU_CAPTURED / 'profile').as_posix()}/`."])


def serve_table(src: Sources) -> str:
    """docs/results/serving.md: the load tester's reports (``prismatic_tr.serve.report``), soaks last and marked."""
    from prismatic_tr.serve.report import in_reading_order, markdown_table

    return markdown_table(in_reading_order(src.serve))


def exact_table(src: Sources) -> str:
    """docs/guides/benchmarking.md: the exact savings (OpenVLA's towers stop at the kept block), measured by
    ``benchmarks/exact_savings.py``."""
    e = src.exact
    rows = [["towers run every block, as OpenVLA's do", f"{e['all_blocks_ms']:.0f}", "1.00x"],
            ["towers stop after the kept block", f"{e['stop_early_ms']:.0f}", f"{e['speedup']:.2f}x"]]
    notes = ["", f"`{e['command']}`: {e['model']}, {e['dtype']}, {e['repeats']} interleaved runs after {e['warmup']} "
             f"warm-up, {e['threads']} threads (torch {e['torch']}); saved {e['saved_ms']:.0f} ms a step; actions "
             + ("bit-identical." if e["identical_actions"] else "NOT identical.")]
    return "\n".join(table_lines(["towers", "predict_action ms", "end to end"], rows) + notes)


def commands_table(src: Sources) -> str:
    """README.md, Installation: the README's two commands as a new user runs them (each on a fresh clone, its
    install included), one row per command and machine (``commands/*.json``, ``benchmarks/time_commands.py``)."""
    rows = []
    for rec in src.commands:
        for run in rec["runs"]:
            status = "" if run["exit_status"] == 0 else f" (exit {run['exit_status']})"
            install = f"{run['install_s']:.0f} s" if run.get("install_s") is not None else "-"
            rows.append([f"`{run['command']}`", cpu_words(rec) + f", {cores_of(rec)} cores",
                         rec["dtype_auto"], f"{run['wall_s'] / 60:.1f} min{status}", install,
                         f"{rec['date_utc'][:10]}, `{rec['commit'][:7]}`"])
    header = ["command", "CPU", "`--dtype auto`", "wall time, install included", "of which install", "measured"]
    notes = ["", "Each command in a fresh clone of that commit, which makes its own `.venv` (uv's download cache as "
             "the machine had it), on a quiet machine: `python benchmarks/time_commands.py --output "
             "benchmarks/results/commands/<machine>.json`."]
    if not any(rec["dtype_auto"] == "bfloat16" for rec in src.commands):
        notes[-1] += (" Not measured yet: a CPU with AMX-BF16 or AVX512-BF16, where `--dtype auto` picks bfloat16 "
                      "(no such machine was at hand for this version).")
    return "\n".join(table_lines(header, rows) + notes)
