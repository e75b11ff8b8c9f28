"""Checkpoints: adapter, merged model (+ processor, statistics, reduction settings), trainer state; resume.

Layout of one checkpoint directory (``run_dir/checkpoints/latest`` or ``run_dir/checkpoints/step_000100``)::

    config.json, model.safetensors        merged model; config holds norm_stats and token_reduction
    tokenizer files, preprocessor_config  the processor
    *.py (+ auto_map in the JSON files)   the base's remote code, when it had some (else README.md: what loads it)
    dataset_statistics.json               OpenVLA format
    adapter/                              peft adapter (or under --adapter_tmp_dir/<exp_id>/<name>)
    trainer_state.pt                      {"step", "optimizer", "adapter_dir", "exp_id"}

Merging never needs a second copy of the model on an accelerator: rank 0 loads a fresh copy of the base
weights on the CPU, loads the saved adapter into it, merges (``merge_and_unload``) and saves. The directory
is written under a temporary name and renamed into place, so a crash never leaves half a checkpoint.

A checkpoint loads the ways its base (``--vla_path``) loads: with this package's ``load_vla`` always, and, when the
base came with OpenVLA's remote code (as ``openvla/openvla-7b``), with OpenVLA's own ``AutoProcessor`` /
``AutoModelForVision2Seq.from_pretrained(dir, trust_remote_code=True)`` on its pins (:func:`carry_remote_code`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from prismatic_tr.data.statistics import save_dataset_statistics
from prismatic_tr.models.checkpoint import carry_remote_code
from prismatic_tr.models.loading import local_checkpoint_dir
from prismatic_tr.training.config import FinetuneConfig, TokenReductionConfig
from prismatic_tr.training.model import OFT_HEADS, load_base, oft_heads, set_token_reduction
from prismatic_tr.vla import (
    Setting,
    attach_token_reduction,
    current_token_reduction,
    get_token_reduction,
    read_settings,
)

STATE_FILE = "trainer_state.pt"


def checkpoint_name(cfg: FinetuneConfig, step: int) -> str:
    return "latest" if cfg.save_latest_checkpoint_only else f"step_{step:06d}"


def set_norm_stats(vla: nn.Module, stats: dict[str, Any]) -> None:
    """Add ``stats`` ({dataset: {"action": ...}}) to the model's norm_stats (attribute and config)."""
    merged = dict(getattr(vla, "norm_stats", None) or getattr(vla.config, "norm_stats", None) or {})
    merged.update(stats)
    vla.norm_stats = merged
    vla.config.norm_stats = merged


def merge_on_cpu(cfg: FinetuneConfig, adapter_dir: Path, dtype: torch.dtype,
                 reductions: Sequence[Setting] | None = None) -> nn.Module:
    """Fresh base weights on the CPU + the saved adapter, merged into plain Linear layers, with ``reductions``
    attached (default: ``cfg.token_reduction``; the trained model's :func:`current_token_reduction` carries a learned
    scorer as trained)."""
    from peft import PeftModel

    base, _ = load_base(cfg.vla_path, dtype=dtype, device="cpu")
    if reductions is None:
        set_token_reduction(base, cfg.token_reduction)
    else:
        set_token_reduction(base, TokenReductionConfig())
        for settings in reductions:
            attach_token_reduction(base, settings)
    return PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()


def copy_heads(trained: nn.Module, merged: nn.Module) -> None:
    """Copy an OFT model's trained heads (action head, proprio projector) into ``merged``; nothing for OpenVLA."""
    for name in OFT_HEADS:
        head = getattr(merged, name, None)
        if isinstance(head, nn.Module):
            head.load_state_dict(getattr(trained, name).state_dict())


def _write_merged(
    cfg: FinetuneConfig, model: nn.Module, processor: Any, stats: dict[str, Any], out: Path,
    adapter_dir: Path | None, dtype: torch.dtype,
) -> None:
    live = current_token_reduction(model) if cfg.token_reduction.enabled else []  # also writes model's config
    if cfg.use_lora:
        merged = merge_on_cpu(cfg, adapter_dir, dtype=dtype, reductions=live)  # type: ignore[arg-type]
        copy_heads(model, merged)  # an OFT model's heads trained whole, beside the adapter
    else:
        merged = model
    set_norm_stats(merged, stats)
    merged.save_pretrained(str(out))
    processor.save_pretrained(str(out))
    carry_remote_code(local_checkpoint_dir(cfg.vla_path), out)
    save_dataset_statistics(stats, out)


def save_checkpoint(
    cfg: FinetuneConfig,
    run_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    processor: Any,
    stats: dict[str, Any],
    merge_dtype: torch.dtype = torch.float32,
) -> Path:
    """Write one checkpoint (call on rank 0 only, with the unwrapped model); returns its directory.

    ``merge_dtype``: dtype of the fresh CPU copy the adapter is merged into (the training dtype).
    """
    name = checkpoint_name(cfg, step)
    final = run_dir / "checkpoints" / name
    tmp = run_dir / "checkpoints" / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    adapter_dir: Path | None = None
    if cfg.use_lora:
        adapter_root = Path(cfg.adapter_tmp_dir) / cfg.exp_id() if cfg.adapter_tmp_dir else None
        adapter_dir = (adapter_root / name) if adapter_root else (tmp / "adapter")
        shutil.rmtree(adapter_dir, ignore_errors=True)
        model.save_pretrained(str(adapter_dir))
    _write_merged(cfg, model, processor, stats, tmp, adapter_dir, merge_dtype)
    final_adapter = (final / "adapter") if adapter_dir == tmp / "adapter" else adapter_dir
    state = {"step": step, "optimizer": optimizer.state_dict(), "exp_id": cfg.exp_id(),
             "adapter_dir": str(final_adapter) if final_adapter else None}
    torch.save(state, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def load_trainer_state(checkpoint_dir: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint; ValueError if ``checkpoint_dir`` is not one."""
    path = Path(checkpoint_dir) / STATE_FILE
    if not path.is_file():
        raise ValueError(f"resume_from={str(checkpoint_dir)!r} is not a checkpoint of this script (no {STATE_FILE})")
    return torch.load(path, map_location="cpu", weights_only=False)


def restore(model: nn.Module, optimizer: torch.optim.Optimizer, cfg: FinetuneConfig, checkpoint_dir: Path) -> int:
    """Load adapter (or full weights) and optimizer state from ``checkpoint_dir``; returns the step reached."""
    state = load_trainer_state(checkpoint_dir)
    if cfg.use_lora:
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        adapter = next((Path(p) for p in (state.get("adapter_dir"), Path(checkpoint_dir) / "adapter")
                        if p and Path(p).is_dir()), None)
        if adapter is None:
            raise ValueError(f"the adapter of checkpoint {checkpoint_dir} is missing ({state.get('adapter_dir')})")
        try:
            result = set_peft_model_state_dict(model, load_peft_weights(str(adapter), device="cpu"))
        except RuntimeError as err:  # size mismatch: another lora_rank or model
            raise ValueError(f"resume_from={str(checkpoint_dir)!r} does not match this run's model/LoRA: {err}") from err
        unexpected = list(getattr(result, "unexpected_keys", []))
        if unexpected:
            raise ValueError(f"adapter in {adapter} does not match the model: unexpected keys {unexpected[:3]}")
    else:
        from safetensors.torch import load_file

        from prismatic_tr.models.checkpoint import from_checkpoint_key

        saved = load_file(str(Path(checkpoint_dir) / "model.safetensors"))  # OpenVLA's key names (scale_factor)
        weights = model.weights_module() if oft_heads(model) else model  # OFT: its heads are in their own files
        weights.load_state_dict({from_checkpoint_key(k): v for k, v in saved.items()}, strict=True)
    restore_heads(model, Path(checkpoint_dir))
    restore_scorer(model, Path(checkpoint_dir))
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def restore_heads(model: nn.Module, checkpoint_dir: Path) -> None:
    """Copy an OFT checkpoint's heads (``<name>--*checkpoint.pt``) into ``model``'s, in place (the optimizer keeps
    its parameters); nothing for OpenVLA. ValueError naming a head the checkpoint lacks."""
    from prismatic_tr.models.oft_checkpoint import component_files, read_component

    if not oft_heads(model):
        return
    files = component_files(checkpoint_dir)
    for name in OFT_HEADS:
        head = getattr(model, name, None)
        if isinstance(head, nn.Module):
            if name not in files:
                raise ValueError(f"resume_from={str(checkpoint_dir)!r} holds no {name}--*checkpoint.pt")
            head.load_state_dict(read_component(files[name]), strict=True)


def restore_scorer(model: nn.Module, checkpoint_dir: Path) -> None:
    """Put the learned scorer a checkpoint's ``config.json`` holds into ``model``'s live vision site (nothing when
    the site learns nothing); ValueError when the checkpoint has no scorer of that width."""
    handle = get_token_reduction(model)
    if handle is None or not handle.scorer_parameters():
        return
    config = json.loads((checkpoint_dir / "config.json").read_text())
    saved = [s.scorer for s in read_settings(SimpleNamespace(**config)) if s.scorer is not None]
    if not saved or len(saved[0]) != sum(p.numel() for p in handle.scorer_parameters()):
        raise ValueError(f"resume_from={str(checkpoint_dir)!r} holds no learned scorer for this run's vision site "
                         "(config.json token_reduction.scorer)")
    with torch.no_grad():
        handle.scorer.weight.copy_(torch.tensor(saved[0][:-1]))
        handle.scorer.bias.fill_(saved[0][-1])
