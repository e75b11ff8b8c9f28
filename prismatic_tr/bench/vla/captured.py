"""Eager against CUDA-graph ``predict_action`` on a GPU, every setting interleaved, beside the model's roofline.

    >>> rows = benchmark_captured(vla, sample_inputs, ["vision:diverse:0.1@0.25"], num_runs=20)
    >>> rows[1]["captured_speedup"], rows[0]["captured_vs_roofline"]

Method (:func:`benchmark_captured`; the model on a CUDA GPU, :mod:`prismatic_tr.vla.cuda_graph`):

* Per setting, untimed, with the setting attached: one step counting MACs per phase
  (:func:`~prismatic_tr.bench.vla.measure.phase_macs`), the eager ``predict_action`` (the answer), the capture
  (:class:`~prismatic_tr.vla.cuda_graph.CapturedStep`) and its first replay, compared with the eager answer
  (``captured_max_abs_diff``, ``captured_equal``). On OpenVLA a second graph of the step without its decode steps
  (prompt, towers, reduction, projector, prefill and the first token) is captured too.
* Then ``warmup`` untimed and ``num_runs`` timed rounds; each round runs every setting once in alternating order
  (A B C, C B A, ...): the setting attached, its eager ``predict_action``; detached, its captured call (the graph
  replays what was captured, whatever is attached); on OpenVLA its prefill-only graph. Each call is timed on the
  wall clock from a synchronised start to its return (``predict_action`` ends with the copy of the actions to the
  host, so the GPU work is inside).
* ``eager_speedup`` / ``captured_speedup``: the unreduced row's median over the row's, each mode against its own
  unreduced row; ``capture_gain``: eager over captured for the same setting. ``decode_share`` (OpenVLA, captured):
  1 - prefill-only / whole step, what the 6 decode steps take of a captured step.
* Noise: a mode's speedups in a row are flagged (``eager_noise_flag``, ``captured_noise_flag``) when that row's or
  the unreduced row's p90 / p10 exceeds :data:`~prismatic_tr.bench.measure.noise.SPREAD_LIMIT` (the noise rule's
  end-to-end spread; there are no phases here to gauge the vision departure on).
* Roofline (:func:`roofline`): per phase the larger of the bytes of weights it reads over the memory bandwidth and
  its FLOPs (2 x MACs) over the matrix peak, summed over the phases; the bandwidth and peak are measured on the
  GPU at the start (:func:`measured_peaks`: a device-to-device copy, an 8192^3 bfloat16 matrix product) and the
  datasheet's figures are recorded beside them. Bytes read: OpenVLA reads the towers and projector once and the
  language model's layers and output head once per generated token (the prefill, then 6 decode steps);
  OpenVLA-OFT reads the towers, projectors, the layers once (one pass) and its action head. Activations and the KV
  cache are left out, so the roofline is a lower bound on the step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.bench.measure.noise import SPREAD_LIMIT
from prismatic_tr.bench.measure.timing import summarize, synchronize
from prismatic_tr.bench.vla.benchmark import STEPS
from prismatic_tr.bench.vla.measure import model_state, phase_macs, pick_unnorm_key, restore_model_state
from prismatic_tr.bench.vla.step import prepare_inputs
from prismatic_tr.models.wrappers import unwrap_vla
from prismatic_tr.vla import reduction_cut, reductions_attached, remove_token_reduction
from prismatic_tr.vla.cuda_graph import CapturedStep, call_inputs, check_capturable
from prismatic_tr.vla.spec import Setting, parse_setting

# Datasheet figures (dense bfloat16 tensor-core peak, HBM bandwidth), recorded beside the measured ones; matched on
# the device name. Source: NVIDIA H100 Tensor Core GPU datasheet (SXM5: 3.35 TB/s, 989 TFLOP/s) and NVIDIA H200
# datasheet (4.8 TB/s, 989 TFLOP/s).
DATASHEETS: dict[str, dict[str, float]] = {
    "H100": {"bandwidth_gb_s": 3350.0, "bf16_tflop_s": 989.0},
    "H200": {"bandwidth_gb_s": 4800.0, "bf16_tflop_s": 989.0},
}


def measured_peaks(device: torch.device, copy_gib: float = 2.0, matmul: int = 8192, repeats: int = 10) -> dict:
    """What the GPU sustains now: ``bandwidth_gb_s`` (a device-to-device copy of ``copy_gib`` GiB, bytes read and
    written counted, best of ``repeats``) and ``bf16_tflop_s`` (``matmul``^3 bfloat16 products, best of
    ``repeats``), with the datasheet's figures where the device is known (``datasheet``, else None)."""
    n = int(copy_gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    a = torch.randn(matmul, matmul, dtype=torch.bfloat16, device=device)
    b = torch.randn(matmul, matmul, dtype=torch.bfloat16, device=device)

    def best(fn: Any) -> float:
        fn()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
        return min(times)

    copy_s = best(lambda: dst.copy_(src))
    matmul_s = best(lambda: torch.mm(a, b))
    name = torch.cuda.get_device_name(device)
    sheet = next((v for k, v in DATASHEETS.items() if k in name), None)
    return {"gpu": name, "bandwidth_gb_s": 2 * n * 2 / copy_s / 1e9, "bf16_tflop_s": 2 * matmul**3 / matmul_s / 1e12,
            "datasheet": sheet}


def _nbytes(module: nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() * p.element_size() for p in module.parameters())


def phase_bytes(vla: nn.Module, family: str, tokens: int) -> dict[str, int]:
    """Bytes of weights each phase of one step reads (see the module docstring); ``tokens``: action tokens
    generated per step on OpenVLA (the prefill's and the decode steps')."""
    m = unwrap_vla(vla)
    lm = m.language_model
    layers = _nbytes(lm.model.layers) + _nbytes(lm.model.norm)
    common = {"vision": _nbytes(m.vision_backbone), "reducer": 0,
              "projector": _nbytes(m.projector) + _nbytes(getattr(m, "proprio_projector", None))}
    if family == "openvla-oft":
        head = getattr(m, "action_head", None)
        return {**common, "llm": layers, "head": _nbytes(head) if head is not None else _nbytes(lm.lm_head)}
    per_token = layers + _nbytes(lm.lm_head)
    return {**common, "prefill": per_token, "decode": (tokens - 1) * per_token}


def roofline(bytes_per_phase: dict[str, int], gmacs_per_phase: dict[str, float], peaks: dict) -> dict[str, float]:
    """``{phase}_roofline_ms`` (the larger of bytes / bandwidth and 2 x MACs / peak) and ``roofline_ms`` (their
    sum) from :func:`phase_bytes`, ``{phase: GMACs}`` and :func:`measured_peaks`'s figures."""
    out: dict[str, float] = {}
    for phase, nbytes in bytes_per_phase.items():
        memory_ms = nbytes / (peaks["bandwidth_gb_s"] * 1e9) * 1e3
        compute_ms = 2 * gmacs_per_phase.get(phase, 0.0) * 1e9 / (peaks["bf16_tflop_s"] * 1e12) * 1e3
        out[f"{phase}_roofline_ms"] = max(memory_ms, compute_ms)
    out["roofline_ms"] = sum(out.values())
    return out


def _timed(device: torch.device, fn: Any) -> tuple[float, Any]:
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1e3, result


def _actions(result: Any) -> np.ndarray:
    """The actions of a ``predict_action`` result (OFT returns ``(actions, hidden)``)."""
    return np.asarray(result[0] if isinstance(result, tuple) else result, dtype=np.float64)


def _compare(eager: Any, captured: Any) -> dict[str, Any]:
    a, b = _actions(eager), _actions(captured)
    return {"captured_max_abs_diff": float(np.abs(a - b).max()), "captured_equal": bool(np.array_equal(a, b)),
            "action_range": float(a.max() - a.min())}


def _spread_fields(rows: list[dict], mode: str) -> None:
    base = rows[0]
    for row in rows:
        row[f"{mode}_speedup"] = base[f"{mode}_ms"] / row[f"{mode}_ms"]
        row[f"{mode}_spread"] = row[f"{mode}_ms_p90"] / row[f"{mode}_ms_p10"]
    for row in rows:
        reasons = [f"{who} p90/p10 {r[f'{mode}_spread']:.2f} exceeds {SPREAD_LIMIT:.2f}"
                   for who, r in (("row", row), ("unreduced", base)) if r[f"{mode}_spread"] > SPREAD_LIMIT]
        row[f"{mode}_noise_flag"], row[f"{mode}_noise_reason"] = bool(reasons), "; ".join(reasons)


def _setting_row(vla: nn.Module, family: str, step: Any, setting: Setting, call: dict, key: str, pool: Any,
                 peaks: dict, tokens: int) -> tuple[dict, list[CapturedStep]]:
    """Untimed part of one setting's row (attached): MACs, roofline, capture and its comparison with eager."""
    device = call["pixel_values"].device
    out, macs = phase_macs(step)
    eager = unwrap_vla(vla).predict_action(**call, unnorm_key=key)
    torch.cuda.reset_peak_memory_stats(device)
    captured = [CapturedStep(vla, call, key, pool=pool)]
    if family == "openvla":
        captured.append(CapturedStep(vla, call, key, pool=pool, tokens=1))
    replay = captured[0](call)
    gmacs = {p: macs[f"{p}_gmacs"] for p in step.phases.names}
    n_in = step.num_patches
    row = {"setting": setting.label, "cut": reduction_cut(vla), "num_patches": out.shapes["reduced_features_shape"][1],
           "num_patches_in": n_in, "llm_visual_tokens": out.llm_visual_tokens, "seq_len": out.seq_len,
           "batch_size": call["input_ids"].shape[0], "total_gmacs": macs["total_gmacs"], **_compare(eager, replay),
           "capture_peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
           **{f"{p}_gmacs": g for p, g in gmacs.items()},
           **roofline(phase_bytes(vla, family, tokens), gmacs, peaks)}
    return row, captured


def benchmark_captured(vla: nn.Module, sample_inputs: dict[str, torch.Tensor], settings: Sequence[str | Setting],
                       num_runs: int = 20, warmup: int = 3, unnorm_key: str | None = None, seed: int = 0,
                       peaks: dict | None = None) -> list[dict]:
    """Time eager and captured ``predict_action`` of ``vla`` (native OpenVLA / OFT on a CUDA GPU) unreduced and under
    each of ``settings`` (specs, :mod:`prismatic_tr.vla.spec`), interleaved; one dict per setting, unreduced first
    (fields in the module docstring). ``sample_inputs``: processor outputs, one instruction per batch; ``peaks``:
    :func:`measured_peaks` (measured here when None). The model is left as it was found (a reduction attached before
    is detached for the run and put back after)."""
    family = check_capturable(vla)
    for name, value in (("num_runs", num_runs), ("warmup", warmup)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "num_runs" else 0):
            raise ValueError(f"{name}={value!r} is not allowed; use an integer >= {1 if name == 'num_runs' else 0}")
    parsed = list(dict.fromkeys([parse_setting("none"), *(s if isinstance(s, Setting) else parse_setting(s)
                                                          for s in settings)]))
    device = next(unwrap_vla(vla).parameters()).device
    key = pick_unnorm_key(vla, unnorm_key)
    tokens = unwrap_vla(vla).get_action_dim(key)
    peaks = peaks or measured_peaks(device)
    inputs = prepare_inputs(vla, sample_inputs, device)
    call = call_inputs(family, inputs.input_ids, inputs.pixel_values, None, inputs.proprio)
    step = STEPS[family](vla, inputs, tokens)
    pool = torch.cuda.graph_pool_handle()
    saved = model_state(vla)
    try:
        remove_token_reduction(vla)
        rows = _timed_rows(vla, family, step, parsed, call, key, pool, peaks, tokens, device, num_runs, warmup, seed)
    finally:
        restore_model_state(vla, saved)
    for mode in ("eager", "captured"):
        _spread_fields(rows, mode)
    for row in rows:
        row.update(family=family, num_runs=num_runs, warmup=warmup, dtype=str(inputs.pixel_values.dtype)[6:])
    return rows


def _timed_rows(vla: nn.Module, family: str, step: Any, parsed: list[Setting], call: dict, key: str, pool: Any,
                peaks: dict, tokens: int, device: torch.device, num_runs: int, warmup: int, seed: int) -> list[dict]:
    """The untimed rows, then the interleaved rounds (see the module docstring); medians and ratios filled in."""
    rows, graphs = [], []
    with torch.no_grad():
        for s in parsed:
            with reductions_attached(vla, s.reductions(seed)):
                row, captured = _setting_row(vla, family, step, s, call, key, pool, peaks, tokens)
            rows.append(row)
            graphs.append(captured)
        samples: list[dict[str, list[float]]] = [{"eager": [], "captured": [], "prefill_only": []} for _ in parsed]
        order = list(range(len(parsed)))
        for r in range(-warmup, num_runs):
            for i in order if r % 2 == 0 else order[::-1]:
                with reductions_attached(vla, parsed[i].reductions(seed)):
                    eager_ms, _ = _timed(device, lambda: unwrap_vla(vla).predict_action(**call, unnorm_key=key))
                times = {"eager": eager_ms, "captured": _timed(device, functools.partial(graphs[i][0], call))[0]}
                if len(graphs[i]) > 1:
                    times["prefill_only"] = _timed(device, functools.partial(graphs[i][1], call))[0]
                if r >= 0:
                    for name, ms in times.items():
                        samples[i][name].append(ms)
    for row, smp in zip(rows, samples, strict=True):
        for name, values in smp.items():
            if values:
                stats = summarize(values)
                row.update({f"{name}_ms": stats["median"], f"{name}_ms_p10": stats["p10"],
                            f"{name}_ms_p90": stats["p90"]})
        row["capture_gain"] = row["eager_ms"] / row["captured_ms"]
        row["captured_vs_roofline"] = row["captured_ms"] / row["roofline_ms"]
        if "prefill_only_ms" in row:
            row["decode_share"] = 1.0 - row["prefill_only_ms"] / row["captured_ms"]
    return rows


def format_rows(rows: list[dict]) -> str:
    """A plain-text table of :func:`benchmark_captured`'s rows."""
    head = (f"{'setting':<30} {'tok':>4} {'eager ms':>9} {'x':>6} {'graph ms':>9} {'x':>6} {'gain':>6} "
            f"{'roof ms':>8} {'/roof':>6} {'decode':>7} {'max|d|':>8}  noise")
    lines = [head, "-" * len(head)]
    for r in rows:
        noise = ",".join(m for m in ("eager", "captured") if r[f"{m}_noise_flag"]) or "-"
        decode = f"{r['decode_share']:.2f}" if "decode_share" in r else "-"
        lines.append(f"{r['setting']:<30} {r['llm_visual_tokens']:>4} {r['eager_ms']:>9.2f} {r['eager_speedup']:>6.2f} "
                     f"{r['captured_ms']:>9.2f} {r['captured_speedup']:>6.2f} {r['capture_gain']:>6.2f} "
                     f"{r['roofline_ms']:>8.2f} {r['captured_vs_roofline']:>6.2f} {decode:>7} "
                     f"{r['captured_max_abs_diff']:>8.2g}  {noise}")
    return "\n".join(lines)
