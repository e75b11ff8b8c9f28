"""Untimed measurements of the policy-step benchmark: MACs and memory per step, fidelity against the
unreduced model, and saving/restoring the model's state around a benchmark."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from prismatic_tr.bench.measure.devices import as_device
from prismatic_tr.bench.vla.step import PolicyStep, StepBase, counted_call
from prismatic_tr.eval import kl_divergence, top1_agreement
from prismatic_tr.vla import (
    Setting,
    attach_token_reduction,
    get_token_reduction,
    remove_token_reduction,
    unwrap_vla,
)

T = TypeVar("T")


@dataclass
class SavedState:
    """What a benchmark may touch: each module's train/eval flag and the attached reductions (every site)."""

    training: dict[nn.Module, bool]
    reductions: list[Setting]


def model_state(vla: nn.Module) -> SavedState:
    handles = [get_token_reduction(vla), get_token_reduction(vla, site="llm")]
    return SavedState({m: m.training for m in vla.modules()}, [h.settings for h in handles if h is not None])


def restore_model_state(vla: nn.Module, saved: SavedState) -> None:
    """Put back train/eval flags and the reductions found before the benchmark (none if there were none)."""
    remove_token_reduction(vla)
    for settings in saved.reductions:
        attach_token_reduction(vla, settings)
    for module, flag in saved.training.items():
        module.training = flag


def check_device(vla: nn.Module, device: torch.device | str | None) -> torch.device:
    """The model's device; ``ValueError`` if ``device`` is given and differs (move the model first)."""
    model_dev = next(unwrap_vla(vla).parameters()).device
    if device is None:
        return model_dev
    dev = as_device(device)
    if dev.type != model_dev.type or (dev.index is not None and dev != model_dev):
        raise ValueError(f"device={device!r} but the model is on {model_dev}; move the model there first")
    return model_dev


def pick_unnorm_key(vla: nn.Module, unnorm_key: str | None) -> str:
    """``unnorm_key`` if the model has statistics for it, else the first key; ``ValueError`` otherwise."""
    stats = getattr(unwrap_vla(vla), "norm_stats", None) or {}
    if unnorm_key is None and stats:
        return next(iter(stats))
    if unnorm_key not in stats:
        raise ValueError(f"unnorm_key={unnorm_key!r} is not in the model's norm_stats; allowed: {sorted(stats)}")
    return unnorm_key


def reseed(vla: nn.Module) -> None:
    """Restart the draws of a live ``random`` projector reduction, so that two calls see the same tokens."""
    handle = get_token_reduction(vla)
    if handle is not None and callable(getattr(handle, "reseed", None)):
        handle.reseed()


def phase_macs(step: StepBase) -> tuple[Any, dict[str, float]]:
    """Run one step (OpenVLA's or OFT's) counting MACs per phase; returns the step's output and ``{phase}_gmacs``
    + total."""
    macs: dict[str, int] = {}
    out = step.run(counted_call(macs))
    fields = {f"{p}_gmacs": macs[p] / 1e9 for p in step.phases.names}
    fields["total_gmacs"] = sum(macs.values()) / 1e9
    return out, fields


def step_peak_memory_mb(step: StepBase, run: Callable[[], T]) -> tuple[T, dict[str, float | str | None]]:
    """``run()`` (one step of ``step``: the MACs-counting pass, so that memory costs no pass of its own) and
    its memory: CUDA: ``peak_memory_mb`` = max allocated during it (weights included), ``step_memory_mb`` =
    that peak minus what was allocated before. CPU: the same from the process's resident set
    (:func:`rss_peak_mb`), or None where the kernel does not let its high-water mark be reset.
    ``peak_memory_source`` says which."""
    dev = step.inputs.pixel_values.device
    if dev.type != "cuda":
        return rss_peak_mb(run)
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    out = run()
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev)
    return out, {"peak_memory_mb": peak / 2**20, "step_memory_mb": (peak - before) / 2**20,
                 "peak_memory_source": "cuda_max_allocated"}


_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kb(field: str) -> int:
    """A ``kB`` field of /proc/self/status (``VmRSS``, ``VmHWM``)."""
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"{_STATUS} has no {field}")


def rss_peak_mb(fn: Callable[[], T]) -> tuple[T, dict[str, float | str | None]]:
    """``fn()`` and the process's resident-set high-water mark over it on a CPU: ``peak_memory_mb`` = VmHWM
    after it (weights, libraries and interpreter included), ``step_memory_mb`` = that minus VmRSS before (what
    the call added to the resident set; memory the allocator kept from earlier calls is reused, not counted). The
    mark is reset first by writing 5 to /proc/self/clear_refs (Linux >= 4.0); elsewhere both are None.
    tracemalloc would miss torch's allocations."""
    try:
        _CLEAR_REFS.write_text("5")
        before = _status_kb("VmRSS")
    except OSError:
        return fn(), {"peak_memory_mb": None, "step_memory_mb": None, "peak_memory_source": None}
    out = fn()
    peak = _status_kb("VmHWM")
    return out, {"peak_memory_mb": peak / 1024, "step_memory_mb": (peak - before) / 1024,
                 "peak_memory_source": "process_rss_high_water_mark"}


@dataclass
class ModelAnswer:
    """The model's own answer on the inputs: action-token logits (B, A, V) float32 on the CPU, greedy
    action tokens (B, A), and un-normalised actions (B, action_dim)."""

    logits: torch.Tensor
    tokens: torch.Tensor
    actions: np.ndarray


def model_answer(vla: nn.Module, step: PolicyStep, actions: Any) -> ModelAnswer:
    """Greedy action tokens with their logits on the step's prompt (the one ``predict_action`` builds), as
    ``vla`` is (reduction attached or not), beside ``actions``: what the user's model's own ``predict_action``
    returned on the same inputs (the benchmark keeps one of its calls). A ``random`` reducer is reseeded first,
    as before that call, so both see the same draw."""
    inputs, b = step.inputs, step.inputs.input_ids.shape[0]
    reseed(vla)
    gen = step.model.generate_from_prompt(step.prompt, inputs.pixel_values, max_new_tokens=step.num_action_tokens,
                                          return_logits=True)
    return ModelAnswer(gen.logits.float().cpu(), gen.sequences.cpu(), np.asarray(actions, dtype=np.float64).reshape(b, -1))


def fidelity(base: ModelAnswer, other: ModelAnswer, step_tokens: torch.Tensor) -> dict[str, float]:
    """Fidelity of ``other`` against ``base`` on the same inputs, and how often the benchmark's own step
    (``step_tokens`` (B, A)) picked the same action tokens as the model's ``generate``."""
    a = base.logits.shape[1]
    return {
        "action_token_agreement": top1_agreement(base.logits.flatten(0, 1), other.logits.flatten(0, 1)),
        "action_mae": float(np.abs(base.actions - other.actions).mean()),
        "first_token_kl": kl_divergence(base.logits[:, 0], other.logits[:, 0]),
        "step_matches_generate": float((step_tokens.cpu() == other.tokens[:, :a]).double().mean()),
    }
