"""The policy-step benchmark as a job (``vla_scripts/benchmark.py``, entry point ``prismatic-tr-benchmark``):
build or load the model, time every setting, add the bundled policy's success (test and validation episodes,
shipped adapters), choose the best setting on validation, and write results.csv / .json / .png and tradeoff.png.

>>> from prismatic_tr.bench.vla.config import BenchmarkConfig
>>> records = run_benchmark(BenchmarkConfig(preset="tiny", num_runs=1, policy_episodes=0))
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prismatic_tr.bench.measure.devices import cpu_info, dtype_choice, resolve_device
from prismatic_tr.bench.vla.config import BenchmarkConfig
from prismatic_tr.bench.vla.policy_rows import policy_success_applies
from prismatic_tr.cli import EXIT_BAD_INPUT, EXIT_NOISY
from prismatic_tr.models.family import family_of

COMMAND = "python vla_scripts/benchmark.py"  # how results.json names the command that made it

def load_model(cfg: BenchmarkConfig, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any, str]:
    """(vla, processor, description): the checkpoint at ``--vla_path``, else the random reference model."""
    from prismatic_tr.models import build_processor, build_vla, load_vla

    if cfg.vla_path is not None:
        try:
            vla, processor = load_vla(cfg.vla_path, dtype=dtype, device=str(device), reference_api=True)
        except (OSError, ValueError) as err:  # RemoteCodeError is a ValueError
            print(f"benchmark.py: error: cannot load --vla_path {cfg.vla_path!r}: {err}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        return vla, processor, f"checkpoint {cfg.vla_path}"
    preset = cfg.preset or ("openvla-7b" if device.type == "cuda" else "cpu-bench")
    vla = build_vla(preset, cfg.vision_backbone_id, dtype=dtype, device=device, seed=cfg.seed)
    return vla, build_processor(vla.config), f"reference model, preset {preset}, RANDOM weights"


def sample_inputs(processor: Any, instruction: str, batch_size: int, image_size: int, seed: int,
                  num_images: int = 1, proprio_dim: int | None = None) -> dict:
    """Processor outputs for ``batch_size`` x ``num_images`` synthetic RGB images (fixed seed) and one instruction.

    ``num_images`` > 1 (OpenVLA-OFT): each image processed on its own and the pixel values concatenated along the
    channels, as OFT's evaluation does: (B, num_images * C, H, W). ``proprio_dim``: a ``proprio`` (B, proprio_dim)
    float32 state drawn uniformly from [-1, 1] (OFT's normalised range) is added.
    """
    from PIL import Image

    from prismatic_tr.models import build_prompt

    rng = np.random.default_rng(seed)
    prompt = build_prompt(instruction)
    outputs = []
    for _ in range(num_images):
        images = [Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8))
                  for _ in range(batch_size)]
        outputs.append(dict(processor(prompt, images[0], return_tensors="pt") if batch_size == 1
                            else processor([prompt] * batch_size, images, return_tensors="pt")))
    inputs = outputs[0]
    if num_images > 1:
        inputs["pixel_values"] = torch.cat([o["pixel_values"] for o in outputs], dim=1)
    if proprio_dim is not None:
        inputs["proprio"] = torch.from_numpy(rng.uniform(-1.0, 1.0, (batch_size, proprio_dim)).astype(np.float32))
    return inputs


def model_input_sizes(vla: Any) -> tuple[int, int | None]:
    """(images per sample, proprio size or None) that ``vla`` takes: an OpenVLA-OFT model's from its backbone's
    live image count and its config's ``proprio_dim``; (1, None) for OpenVLA."""
    from prismatic_tr.vla import unwrap_vla

    model = unwrap_vla(vla)
    settings = getattr(getattr(model, "config", None), "oft_settings", None)
    if settings is None:
        return 1, None
    return int(model.vision_backbone.get_num_images_in_input()), settings.proprio_dim


def load_average() -> list[float] | None:
    """The 1 / 5 / 15-minute load average (``os.getloadavg``), or None where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def run_metadata(cfg: BenchmarkConfig, source: str, device: torch.device, dtype: torch.dtype,
                 load_at_start: list[float] | None = None, dtype_reason: str = "") -> dict[str, Any]:
    """Command, date, machine (CPU model and instruction-set features, load average at start), the dtype and why
    it was picked, and settings, stored in results.json."""
    import transformers

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "command": " ".join([COMMAND, *sys.argv[1:]]),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu": cpu_info(), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "gpu": gpu,
                    "load_average_at_start": load_at_start},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "model": source, "random_weights": cfg.vla_path is None, "device": str(device),
        "dtype": str(dtype).replace("torch.", ""), "dtype_reason": dtype_reason,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()},
        "conventions": {
            "latency": "median over timed runs (p10/p90 alongside), ms; baseline and settings interleaved",
            "macs": "GMACs per step for the whole batch: matmul-like ops, one multiply-add = 1 MAC",
            "peak_memory_mb": "torch.cuda.max_memory_allocated over one step; on a CPU the process's resident-set "
                              "high-water mark (VmHWM, reset through /proc/self/clear_refs) over one step, "
                              "None where it cannot be reset (peak_memory_source says which)",
            "ideal_speedup": "Amdahl bound from baseline phases: projector x K/N, prefill x (T+K)/(T+N), "
                             "vision and decode unchanged, reducer free (OpenVLA-OFT: the one llm pass in the "
                             "prefill's place, the head in the decode's)",
            "fidelity": "against the unreduced model on the same inputs (generate / predict_action)",
            "noise_flag": noise_convention(),
            "load_average_at_start": "os.getloadavg() (1, 5, 15 min) when the command started",
            "predict_action_speedup": "end to end: the whole predict_action, baseline interleaved (the speed a "
                                      "README reports); speedup: the sum of the timed phases ('phase sum')",
            "best_on_validation": "fastest row per site within 2 points of unreduced success on validation episodes, "
                                  "faster than unreduced end to end, not noisy, no adapter "
                                  "(prismatic_tr.bench.vla.selection)",
            "cpu": "model name and avx2 / avx512f / avx512_bf16 / amx_bf16 from /proc/cpuinfo",
        },
    }


def noise_convention() -> str:
    """``meta["conventions"]["noise_flag"]``: the noise rule's wording (:mod:`prismatic_tr.bench.measure.noise`)."""
    from prismatic_tr.bench.measure.noise import NoiseRule

    return NoiseRule().describe() + " (prismatic_tr.bench.measure.noise)"


def write_output(records: list[dict], meta: dict[str, Any], path: Path) -> Path:
    """One of the job's files, by ``path``'s suffix: ``.csv`` (a row per record), ``.json`` (meta and records) or
    ``.png`` (the speed figure); ValueError for another suffix."""
    from prismatic_tr.bench.vla.report import plot_results, write_csv, write_json

    if path.suffix == ".csv":
        return write_csv(records, path)
    if path.suffix == ".json":
        return write_json(records, path, meta)
    if path.suffix == ".png":  # speed and the random model's fidelity: an adapter row repeats its setting's speed
        title = f"{meta['model']} | {meta['device']} {meta['dtype']} | batch {meta['config']['batch_size']}"
        return plot_results([r for r in records if not r.get("adapter")], path, title=title)
    raise ValueError(f"{path}: suffix {path.suffix!r} is not allowed; the job writes .csv, .json and .png")


def write_outputs(records: list[dict], meta: dict[str, Any], output_dir: Path) -> list[Path]:
    """results.csv, results.json and results.png in ``output_dir`` (created if needed)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    return [write_output(records, meta, output_dir / f"results.{ext}") for ext in ("csv", "json", "png")]


def headline(records: list[dict]) -> str:
    """Per setting: the end-to-end speedup, the phase sum against its Amdahl bound and the reducer's share of the
    vision time, and the policy's success (test, and validation where measured)."""
    from prismatic_tr.bench.vla.phases import step_phases

    lines = []
    for r in records[1:]:
        seq = step_phases(r).sequence  # prefill (OpenVLA) or llm (OFT's one pass)
        bound = (f" (phase sum {r['speedup']:.3f} of ideal {r['ideal_speedup']:.3f}, efficiency "
                 f"{r['efficiency']:.2f}; {seq} {r[f'{seq}_speedup']:.3f} of {r[f'{seq}_ideal_speedup']:.3f}; "
                 f"reducer {r['reducer_pct_of_vision']:.2f}% of vision)") if r.get("ideal_speedup") is not None else \
            f" (phase sum {r['speedup']:.3f})"
        if r.get("adapter"):
            bound = f" (the step of {r['speed_from']}: LoRA merged, not timed twice)"
        success = f"; success {r['success_rate']:.0%}" if r.get("success_rate") is not None else ""
        if r.get("validation_success_rate") is not None:
            success += f" (validation {r['validation_success_rate']:.0%})"
        lines.append(f"  {r['setting']:>34}: end to end {r['predict_action_speedup']:.3f}x{bound}{success}"
                     + ("  [NOISY: not a result]" if r.get("noise_flag") else ""))
    return "\n".join(lines)


# Expected seconds per unit of work on 2 CPU cores, to weigh the progress bar (only its time-left estimate uses them).
SECONDS_PER = {"record": 10.0, "round": 2.5, "episode": 0.5}


def job_progress(cfg: BenchmarkConfig, settings: int, oft: bool = False) -> Any:
    """One bar over the timing of every setting and the policy's episodes (see JobProgress)."""
    from prismatic_tr.bench.measure.progress import JobProgress

    episodes = 0
    if policy_success_applies(cfg.vla_path, cfg.policy_episodes, oft) is None:
        per_row = cfg.policy_episodes + cfg.validation_episodes
        episodes = per_row * (settings + len(cfg.adapters))
    plan = {"record": (settings, SECONDS_PER["record"]),
            "round": ((cfg.warmup + cfg.num_runs) * settings, SECONDS_PER["round"]),
            "episode": (episodes, SECONDS_PER["episode"])}
    return JobProgress(plan, desc="benchmark", enabled=cfg.progress)


def count_settings(cfg: BenchmarkConfig) -> int:
    """Rows the job will have: the baseline, the method x ratio grid and the further specs, without repeats."""
    from prismatic_tr.vla.spec import build_settings, parse_setting

    grid = build_settings(cfg.methods, cfg.ratios, cfg.spatial_merge_size)
    return len(dict.fromkeys(grid + [parse_setting(s) for s in cfg.settings]))


def add_policy_rows(records: list[dict], cfg: BenchmarkConfig, progress: Any = None) -> dict[str, Any]:
    """The bundled policy's success on test and validation episodes and the adapter rows, merged into
    ``records``; returns the metadata fields saying what was done (or why not)."""
    from prismatic_tr.bench.vla.policy_rows import add_adapter_rows, add_test_success, add_validation_success

    reason = policy_success_applies(cfg.vla_path, cfg.policy_episodes, family_of(records).chunked)
    if reason is not None:
        return {"policy_fidelity": reason}
    on_episode = (lambda *_: progress.step("episode")) if progress else None
    meta = {"policy_fidelity": add_test_success(records, cfg.policy_episodes, cfg.policy_split, on_episode)}
    if meta["policy_fidelity"].startswith("not measured"):
        return meta
    meta["validation"] = add_validation_success(records, cfg.validation_episodes, on_episode)
    meta["adapters"] = add_adapter_rows(records, cfg.adapters, cfg.policy_split, cfg.policy_episodes,
                                        cfg.validation_episodes, on_episode)
    return meta


def report_best(records: list[dict], meta: dict[str, Any]) -> None:
    """Print the best-setting lines (chosen on validation) and store them in ``meta["best_on_validation"]``."""
    from prismatic_tr.bench.vla.selection import best_lines, best_on_validation, chosen_settings

    best = best_on_validation(records)
    meta["best_on_validation"] = chosen_settings(best)
    if not best:
        print("best setting: none chosen (no validation episodes)")
    for line in best_lines(best):
        print(line)


def _plot_tradeoff(records: list[dict], cfg: BenchmarkConfig, source: str) -> Path:
    from prismatic_tr.policy.report import plot_tradeoff

    n = records[0].get("policy_episodes")
    return plot_tradeoff(
        records, cfg.output_dir / "tradeoff.png",
        "speed and success of each setting (fractions of tokens and depth, applied to each model)",
        x_label=f"end-to-end speedup of predict_action on {source}",
        y_label=f"success of the bundled tabletop policy ({n} {cfg.policy_split}-split episodes, 95 % interval)")


def _measure(cfg: BenchmarkConfig) -> tuple[list[dict], dict[str, Any], Any, str]:
    """Build the model, time every setting; (records, meta, progress, source)."""
    from prismatic_tr.bench.vla.benchmark import benchmark_token_reduction

    load_at_start = load_average()
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
    device = resolve_device(cfg.device)
    dtype, why = dtype_choice(cfg.dtype, device)
    vla, processor, source = load_model(cfg, device, dtype)
    if cfg.compile:
        from prismatic_tr.bench.vla.compiled import compile_blocks

        compile_blocks(vla, freeze=cfg.freeze)  # for the rest of this process; the warm-up rounds compile each setting
        source += " (blocks compiled, frozen)" if cfg.freeze else " (blocks compiled)"
    image_size = int(getattr(getattr(vla, "config", None), "image_sizes", [224])[0])
    num_images, proprio_dim = model_input_sizes(vla)
    inputs = sample_inputs(processor, cfg.instruction, cfg.batch_size, image_size, cfg.seed, num_images, proprio_dim)
    meta = run_metadata(cfg, source, device, dtype, load_at_start, why)
    print(f"model: {source} | device {device} | dtype {meta['dtype']} ({why}) | batch {cfg.batch_size}")
    if meta["random_weights"]:
        print("NOTE: the weights are RANDOM. Latencies are real; fidelity numbers (agreement, action error, KL) "
              "only show that the machinery works. Pass --vla_path for a trained checkpoint.")
    progress = job_progress(cfg, count_settings(cfg), oft=family_of(vla).name == "openvla-oft")
    records = benchmark_token_reduction(
        vla, inputs, methods=cfg.methods, ratios=cfg.ratios, spatial_merge_size=cfg.spatial_merge_size,
        num_runs=cfg.num_runs, warmup=cfg.warmup, progress=cfg.progress, unnorm_key=cfg.unnorm_key, seed=cfg.seed,
        extra_settings=cfg.settings, on_progress=progress.step,
    )
    for rec in records:
        rec["dtype_reason"] = why
    return records, meta, progress, source


def run_benchmark(cfg: BenchmarkConfig) -> list[dict]:
    """Build or load the model, benchmark every setting, add the policy's rows, print the table and write the
    files; returns the records (baseline first, adapter rows after their setting's)."""
    from prismatic_tr.bench.measure.noise import NoiseRule, noise_warnings
    from prismatic_tr.bench.vla.report import format_table

    start = time.perf_counter()
    records, meta, progress, source = _measure(cfg)  # the speed model is freed before the policy's episodes
    meta["timing_s"] = round(time.perf_counter() - start, 1)  # model built and every setting measured
    meta.update(add_policy_rows(records, cfg, progress))
    meta["episodes_s"] = round(max(0.0, time.perf_counter() - start - meta["timing_s"]), 1)
    progress.close()
    print(format_table(records))
    print("latencies: medians in ms; e2e x = the whole predict_action against unreduced (interleaved); phases x = "
          "phase sum; ideal = Amdahl bound; MACs per step; peak MB: CUDA max allocated, on a CPU the process's "
          "resident-set high-water mark over one step")
    if family_of(records).chunked:
        print(f"OpenVLA-OFT: phases vision, reducer, projector (+ proprio), llm (the one parallel pass), head; "
              f"policy success {meta['policy_fidelity']}")
    print(headline(records))
    warnings = noise_warnings(records, meta["machine"]["load_average_at_start"])
    print("\n".join(warnings) if warnings else "noise: no row flagged (" + NoiseRule().describe() + ")")
    has_success = any(r.get("success_rate") is not None for r in records)
    if has_success:
        report_best(records, meta)
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    meta["noisy_rows"] = sum(bool(r["noise_flag"]) for r in records)
    paths = write_outputs(records, meta, cfg.output_dir)
    if has_success:
        paths.append(_plot_tradeoff(records, cfg, source))
    for path in paths:
        print(f"wrote {path}")
    print(f"finished in {meta['wall_s']:.0f} s (model and timing {meta['timing_s']:.0f} s, policy episodes "
          f"{meta['episodes_s']:.0f} s)")
    if cfg.strict and warnings:
        print(f"benchmark.py: --strict: {meta['noisy_rows']} noisy rows; exiting with status {EXIT_NOISY}",
              file=sys.stderr)
        raise SystemExit(EXIT_NOISY)
    if cfg.oft_rows():
        oft = cfg.for_oft()
        print(f"\nOpenVLA-OFT ({oft.preset}: 2 images, proprio, one parallel pass), the same settings -> {oft.output_dir}")
        run_benchmark(oft)
        print(f"whole job (OpenVLA and OpenVLA-OFT rows) finished in {time.perf_counter() - start:.0f} s")
    return records
