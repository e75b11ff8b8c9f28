"""The GPU job of :mod:`prismatic_tr.bench.vla.captured` (``benchmarks/gpu/captured.py``): for each preset (random
weights at the 7B sizes by default) and batch size, eager and captured ``predict_action`` of every setting,
interleaved, beside the roofline; one results file per preset and batch, a table on stdout.

>>> run_captured_job(CapturedJob(presets=("tiny",), batch_sizes=(1,), settings=("diverse:0.25",)))
"""

from __future__ import annotations

import datetime
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.bench.measure.devices import timing_meta
from prismatic_tr.bench.vla.captured import benchmark_captured, format_rows, measured_peaks
from prismatic_tr.bench.vla.job import model_input_sizes, sample_inputs
from prismatic_tr.vla.spec import parse_setting

COMMAND = "python benchmarks/gpu/captured.py"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# The settings timed by default: the projector site at a quarter and a tenth, the vision site at a tenth after a
# quarter of the towers and after 1/20 (the shipped OFT adapter's setting), the llm site.
GPU_SETTINGS = ("diverse:0.25", "diverse:0.1", "vision:diverse:0.1@0.25", "vision:diverse:0.1@0.05",
                "llm:attention:0.5@0.25")


@dataclass(frozen=True)
class CapturedJob:
    """What :func:`run_captured_job` runs; every field is checked in ``__post_init__`` (``ValueError``)."""

    presets: tuple[str, ...] = ("openvla-oft-7b", "openvla-7b")
    batch_sizes: tuple[int, ...] = (1, 8)
    settings: tuple[str, ...] = GPU_SETTINGS
    num_runs: int = 20
    warmup: int = 3
    output_dir: Path = Path("benchmarks/results/gpu_captured")
    instruction: str = "pick up the red block"
    seed: int = 0
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        from prismatic_tr.models.config import PRESETS
        from prismatic_tr.models.oft_config import OFT_PRESETS

        allowed = sorted([*PRESETS, *OFT_PRESETS])
        bad = [p for p in self.presets if p not in allowed]
        if bad or not self.presets:
            raise ValueError(f"presets={list(self.presets)!r}: {bad or 'none given'}; allowed: {allowed}")
        if not self.batch_sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                                       for b in self.batch_sizes):
            raise ValueError(f"batch_sizes={list(self.batch_sizes)!r}; use integers >= 1")
        for s in self.settings:
            parse_setting(s)  # ValueError naming the bad spec
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is not allowed; use one of {sorted(DTYPES)}")
        for name, low in (("num_runs", 1), ("warmup", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} is not allowed; use an integer >= {low}")


def check_cuda(device: str) -> torch.device:
    """``device`` as a torch device; ``ValueError`` unless it is a CUDA device on a machine that has one."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: the captured benchmark needs a CUDA GPU "
                         f"(torch.cuda.is_available() is {torch.cuda.is_available()})")
    return dev


def run_captured_job(job: CapturedJob, device: str = "cuda") -> tuple[list[Path], list[str]]:
    """Build each preset on ``device`` in ``job.dtype``, time it at every batch size, write
    ``<output_dir>/<preset>_b<batch>.json``. A preset or batch that fails is reported with its traceback and the
    job goes on; returns (the files written, the parts that failed). ``ValueError`` before any work without CUDA."""
    from prismatic_tr.models import build_processor, build_vla

    dev = check_cuda(device)
    job.output_dir.mkdir(parents=True, exist_ok=True)
    peaks = measured_peaks(dev)
    torch.cuda.empty_cache()
    print(f"GPU {peaks['gpu']}: measured {peaks['bandwidth_gb_s']:.0f} GB/s copy, {peaks['bf16_tflop_s']:.0f} "
          f"TFLOP/s bf16 matmul; datasheet {peaks['datasheet']}", flush=True)
    written, failed = [], []
    for preset in job.presets:
        start = time.perf_counter()
        try:
            vla = build_vla(preset, dtype=DTYPES[job.dtype], device=dev, seed=job.seed).eval()
        except Exception:  # noqa: BLE001 - reported, the job goes on
            traceback.print_exc()
            failed.append(preset)
            continue
        processor = build_processor(vla.config)
        images, proprio = model_input_sizes(vla)
        for batch in job.batch_sizes:
            try:
                inputs = sample_inputs(processor, job.instruction, batch, 224, job.seed, images, proprio)
                rows = benchmark_captured(vla, inputs, job.settings, job.num_runs, job.warmup, seed=job.seed,
                                          peaks=peaks)
            except Exception:  # noqa: BLE001 - reported, the job goes on
                traceback.print_exc()
                failed.append(f"{preset} batch {batch}")
                continue
            print(f"\n{preset}, batch {batch} (RANDOM weights, {job.dtype}, {peaks['gpu']}):\n{format_rows(rows)}",
                  flush=True)
            path = job.output_dir / f"{preset}_b{batch}.json"
            meta = {**timing_meta(" ".join([COMMAND, *sys.argv[1:]]), DTYPES[job.dtype], dev),
                    "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                    "preset": preset, "random_weights": True, "batch_size": batch, "peaks": peaks,
                    "versions": _versions(), "job": {k: (str(v) if isinstance(v, Path) else v)
                                                      for k, v in asdict(job).items()}}
            path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=_plain) + "\n")
            written.append(path)
        print(f"{preset}: {time.perf_counter() - start:.0f} s", flush=True)
        del vla
        torch.cuda.empty_cache()
    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
    return written, failed


def _versions() -> dict[str, str]:
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": str(torch.version.cuda)}


def _plain(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
