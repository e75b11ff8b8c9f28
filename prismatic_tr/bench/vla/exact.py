"""What the exact savings save: ``predict_action`` with the towers running every block (OpenVLA as is) against
stopping after the block OpenVLA keeps (:mod:`prismatic_tr.vla.exact`), interleaved, and whether the actions
are bit-identical."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.bench.measure.timing import interleaved
from prismatic_tr.vla.exact import apply_exact_savings, run_last_block


@torch.no_grad()
def measure_exact_savings(vla: nn.Module, inputs: dict[str, torch.Tensor], unnorm_key: str, repeats: int = 5,
                          warmup: int = 1) -> dict[str, Any]:
    """``{"all_blocks_ms", "stop_early_ms", "saved_ms", "speedup", "identical_actions"}`` (medians)."""
    def predict() -> np.ndarray:
        return np.asarray(vla.predict_action(**inputs, unnorm_key=unnorm_key, do_sample=False))

    contexts = {"all_blocks": lambda: run_last_block(vla), "stop_early": lambda: apply_exact_savings(vla)}
    with run_last_block(vla):
        full = predict()
    with apply_exact_savings(vla):
        early = predict()
    stats = interleaved({"all_blocks": predict, "stop_early": predict}, warmup=warmup, repeats=repeats,
                        contexts=contexts)
    a, b = stats["all_blocks"].median_ms, stats["stop_early"].median_ms
    return {"all_blocks_ms": a, "stop_early_ms": b, "saved_ms": a - b, "speedup": a / b,
            "identical_actions": bool(np.array_equal(full, early))}


def exact_savings_record(vla_path: str | None, preset: str, dtype: str, repeats: int, warmup: int) -> dict[str, Any]:
    """``benchmarks/exact_savings.py``'s measurement: the checkpoint at ``vla_path`` (else the random-weight
    ``preset``) in ``dtype`` ("bfloat16" / "float32"), one control step's input, :func:`measure_exact_savings`; the
    record (medians in ms, rounded) with the model, the settings and the machine. ValueError naming a bad value before
    any model is built."""
    import time
    from pathlib import Path

    from prismatic_tr.bench.measure.devices import machine_info
    from prismatic_tr.bench.vla.job import sample_inputs
    from prismatic_tr.models import PRESETS, build_processor, build_vla, load_vla

    torch_dtype = getattr(torch, dtype)
    if vla_path is not None:
        if not (Path(vla_path) / "config.json").is_file():
            raise ValueError(f"--vla_path {vla_path!r} is not a checkpoint directory (no config.json)")
        vla, processor = load_vla(vla_path, dtype=torch_dtype)
        source = vla_path
    else:
        if preset not in PRESETS:
            raise ValueError(f"--preset {preset!r} is not allowed; choose one of {sorted(PRESETS)}")
        vla = build_vla(preset, seed=0).to(torch_dtype).eval()
        processor, source = build_processor(vla.config), f"preset {preset} (random weights)"
    inputs = sample_inputs(processor, "pick up the red block", 1, int(vla.config.image_sizes[0]), seed=0)
    inputs = {k: v.to(torch_dtype) if v.is_floating_point() else v for k, v in inputs.items()}
    unnorm_key = next(iter(vla.norm_stats))
    start = time.perf_counter()
    result = measure_exact_savings(vla, inputs, unnorm_key, repeats=repeats, warmup=warmup)
    return {"model": source, "dtype": dtype, "repeats": repeats, "warmup": warmup,
            **{k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()},
            "torch": torch.__version__, "threads": torch.get_num_threads(), "machine": machine_info(),
            "wall_s": round(time.perf_counter() - start, 1)}
