"""An OpenVLA-OFT-style tabletop policy: made from an OpenVLA-style one, trained on chunks with the L1 loss.

OFT is a fine-tuning recipe on top of OpenVLA (moojink/openvla-oft): the towers, projector and Llama of a trained
OpenVLA, plus a proprio projector and an L1-regression head trained from scratch, with several cameras and an
action chunk predicted in one parallel pass. :func:`oft_from_openvla` builds that model from an OpenVLA-style
checkpoint (the bundled tabletop policy by default); :func:`~prismatic_tr.models.oft.predict_chunk` is the training forward (the same pass
as ``predict_action``, with gradients); :func:`train_oft` runs AdamW on the L1 loss (OFT's objective) over batches
of :mod:`prismatic_tr.data.oft`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prismatic_tr.models.oft import NativeOpenVLAOFT, oft_config_from, predict_chunk
from prismatic_tr.models.oft_config import OFTSettings
from prismatic_tr.policy.train_state import STATE_EVERY, restore_train_state, save_train_state

logger = logging.getLogger("prismatic_tr.training")
SHARED = ("vision_backbone", "projector", "language_model")  # the modules an OFT model takes from its OpenVLA base


def oft_from_openvla(vla: nn.Module, settings: OFTSettings, seed: int = 0) -> NativeOpenVLAOFT:
    """An OFT model with ``vla``'s towers, projector and Llama (copied) and a new proprio projector and head
    (drawn with torch seeded by ``seed``); the action statistics are left empty (training sets them).

    ``vla``: a ``NativeOpenVLA``. ValueError when ``settings`` has more images than OFT allows (checked by
    :class:`OFTSettings`) or a shared module's weights do not fit (listed by ``load_state_dict``)."""
    torch.manual_seed(seed)
    model = NativeOpenVLAOFT(oft_config_from(vla.config, settings))
    for name in SHARED:
        getattr(model, name).load_state_dict(getattr(vla, name).state_dict(), strict=True)
    dtype = next(vla.parameters()).dtype
    model.norm_stats, model.config.norm_stats = {}, None
    return model.to(dtype).eval()


def l1_loss(vla: NativeOpenVLAOFT, batch: dict[str, torch.Tensor], autocast: bool) -> torch.Tensor:
    """OFT's objective: the mean absolute error of the normalised chunk (bf16 autocast when ``autocast``)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        predicted = predict_chunk(vla, batch)
    return (predicted.float() - batch["actions"].float()).abs().mean()


@dataclass
class OFTTrainResult:
    """One row per optimizer step (step, loss, lr, step_time_s) and the checkpoints saved, by step."""

    history: list[dict[str, float]] = field(default_factory=list)
    checkpoints: dict[int, Path] = field(default_factory=dict)


def trainable_modules(vla: NativeOpenVLAOFT, freeze_vision: bool) -> list[nn.Module]:
    """What training updates: projector, Llama, proprio projector and head (and the towers unless frozen)."""
    names = ["projector", "language_model", "proprio_projector", "action_head"] + ([] if freeze_vision else
                                                                                   ["vision_backbone"])
    return [m for m in (getattr(vla, n) for n in names) if m is not None]


def train_oft(vla: NativeOpenVLAOFT, batches: Iterator[dict[str, torch.Tensor]], steps: int, lr_factor: Callable[[int], float],
              learning_rate: float, save_dir: Path, save_every: int, save: Callable[[Path], None],
              freeze_vision: bool = True, autocast: bool = False, weight_decay: float = 0.0,
              log_every: int = 50, start: Mapping[str, Any] | None = None, state_path: Path | None = None,
              identity: Mapping[str, Any] | None = None) -> OFTTrainResult:
    """AdamW on the L1 loss for ``steps`` steps (learning rate ``learning_rate * lr_factor(step)``); every
    ``save_every`` steps and at the last one ``save(save_dir / f"step_{n}")`` writes a checkpoint.

    Towers frozen (``freeze_vision``): their parameters get no gradient and they run in eval mode.

    Resuming (:mod:`prismatic_tr.policy.train_state`): ``start``, a state an earlier run wrote, restores weights,
    optimizer, random state, curve and checkpoints and continues at its step (``batches`` must already skip the
    examples that run used); ``state_path`` (with ``identity``) writes the state as training goes."""
    for p in vla.parameters():
        p.requires_grad_(False)
    modules = trainable_modules(vla, freeze_vision)
    params = [p for m in modules for p in m.parameters()]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay)
    vla.train()
    if freeze_vision:
        vla.vision_backbone.eval()
    result, pending, first = OFTTrainResult(), [], 0
    if start is not None:
        first = restore_train_state(start, vla, optimizer)
        result.history = list(start["history"])
        result.checkpoints = {int(k): Path(v) for k, v in start["checkpoints"].items()}
        logger.info("resuming at step %d of %d", first, steps)

    t0 = time.perf_counter()
    for step in range(first, steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate * lr_factor(step)
        loss = l1_loss(vla, next(batches), autocast)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        pending.append((step + 1, loss.detach(), optimizer.param_groups[0]["lr"]))
        last = step + 1 == steps
        keep = state_path is not None and ((step + 1) % STATE_EVERY == 0 or (step + 1) % save_every == 0 or last)
        if (step + 1) % log_every == 0 or last or keep:  # the curve is written through before a state is kept
            per_step = (time.perf_counter() - t0) / len(pending)
            for n, value, lr in pending:
                result.history.append({"step": float(n), "loss": float(value), "lr": lr, "step_time_s": per_step})
            logger.info("oft step %d  loss %.4f  lr %.2e  %.2f s/step", step + 1, result.history[-1]["loss"],
                        result.history[-1]["lr"], per_step)
            pending, t0 = [], time.perf_counter()
        if (step + 1) % save_every == 0 or last:
            vla.eval()
            path = save_dir / f"step_{step + 1}"
            save(path)
            result.checkpoints[step + 1] = path
            vla.train()
            if freeze_vision:
                vla.vision_backbone.eval()
        if keep:
            save_train_state(state_path, step + 1, vla, optimizer, result.history, result.checkpoints, identity or {})
    vla.eval()
    for p in vla.parameters():
        p.requires_grad_(False)
    return result
