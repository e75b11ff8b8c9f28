"""Fine-tuning OpenVLA-OFT policies with ``vla_scripts/finetune.py`` (``--vla_path`` an OFT checkpoint).

What changes from OpenVLA's fine-tuning, and follows OFT's ``finetune.py`` (moojink/openvla-oft, MIT, see NOTICE):

- the data: every step with its action chunk, all the policy's cameras and the state (:mod:`prismatic_tr.data.oft`),
  normalised as OFT trains (actions and proprio to [-1, 1] by the statistics, unused action dimensions 0);
- the forward: the one parallel pass of ``predict_action``, with gradients (``predict_chunk``), any reduction setting
  attached to it exactly as at inference;
- the loss: the L1 distance of the normalised chunk (OFT's L1-regression objective);
- what trains: LoRA on the towers, projector and Llama (or all of them, ``--use_lora false``), and the action head and
  proprio projector whole, as OFT trains them beside its LoRA;
- self-distillation (``--distill_weight w``): the teacher is the same checkpoint unreduced, and the student pays
  ``w`` x the L1 distance from the teacher's chunk on the same batch (continuous actions, no token distribution);
- checkpoints: OFT's layout (the merged VLA, ``action_head--`` / ``proprio_projector--latest_checkpoint.pt``,
  ``dataset_statistics.json``) plus the LoRA adapter in ``adapter/`` and the trainer state.

``--norm_stats_from_vla true`` keeps the policy's own action and proprio statistics (on-policy data relabelled by it,
``vla_scripts/make_onpolicy_data.py``); else they are computed from the data, as OFT does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from prismatic_tr.data import ImageAugmentation, RLDSIterableDataset
from prismatic_tr.data.oft import (
    OFTChunkSource,
    OFTChunkSources,
    OFTChunkTransform,
    OFTCollator,
    oft_statistics,
)
from prismatic_tr.models.oft import predict_chunk
from prismatic_tr.training.checkpoint import load_trainer_state
from prismatic_tr.training.config import FinetuneConfig
from prismatic_tr.training.distributed import DistInfo
from prismatic_tr.training.preflight import DataPlan, check_batch_fits, shared_plan
from prismatic_tr.training.session import Session
from prismatic_tr.training.step import accumulated_step

ChunkLoss = Any  # (predicted chunk (B, chunk, A), batch) -> () tensor


def _source(cfg: FinetuneConfig, vla: nn.Module) -> OFTChunkSource | OFTChunkSources:
    """The policy's chunks of ``data_root_dir``'s dataset, and of every ``aggregate_data_roots`` one after it."""
    s = vla.oft
    sources = [OFTChunkSource(root, cfg.dataset_name, cfg.split, s.num_actions_chunk,
                              vla.vision_backbone.get_num_images_in_input(), s.action_dim)
               for root in (cfg.data_root_dir, *cfg.aggregate_data_roots)]
    return OFTChunkSources(sources) if len(sources) > 1 else sources[0]


def plan_oft_data(cfg: FinetuneConfig, vla: nn.Module, world_size: int) -> DataPlan:
    """Open the dataset with the policy's chunk, cameras and action size (ValueError listing the step keys when it
    lacks a camera or the state), get its statistics (the resume checkpoint's; with ``norm_stats_from_vla`` the
    policy's own action and proprio blocks; else OFT's statistics of the data) and check the batch."""
    source = _source(cfg, vla)
    stats = oft_statistics(source, cfg.dataset_name)
    if cfg.resume_from is not None:
        load_trainer_state(Path(cfg.resume_from))
        saved = json.loads((Path(cfg.resume_from) / "dataset_statistics.json").read_text())
        stats = {cfg.dataset_name: saved[cfg.dataset_name]} if cfg.dataset_name in saved else stats
    elif cfg.norm_stats_from_vla:
        own = (getattr(vla, "norm_stats", None) or {}).get(cfg.dataset_name)
        needed = ["action"] + (["proprio"] if getattr(vla, "proprio_projector", None) is not None else [])
        if own is None or any(k not in own for k in needed):
            raise ValueError(f"norm_stats_from_vla=True needs {needed} statistics for dataset {cfg.dataset_name!r} "
                             f"in vla_path={str(cfg.vla_path)!r}; it has {sorted(getattr(vla, 'norm_stats', {}) or {})}")
        stats[cfg.dataset_name].update({k: own[k] for k in needed})
    n = int(stats[cfg.dataset_name]["num_transitions"])
    check_batch_fits(cfg.batch_size, world_size, n)
    return DataPlan(source, stats, n)  # type: ignore[arg-type]


class ChunkForward(nn.Module):
    """The training forward of an OFT policy as a module (so DDP sees it): collated batch -> (B, chunk, A)
    normalised actions from the L1 head."""

    def __init__(self, vla: nn.Module) -> None:
        super().__init__()
        self.vla = vla

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                proprio: torch.Tensor) -> torch.Tensor:
        batch = {"pixel_values": pixel_values, "input_ids": input_ids, "attention_mask": attention_mask,
                 "proprio": proprio}
        return predict_chunk(self.vla, batch)


INPUTS = ("pixel_values", "input_ids", "attention_mask", "proprio")


def chunk_metrics(model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device, use_bf16: bool,
                  aux_loss: ChunkLoss | None = None) -> dict[str, torch.Tensor]:
    """One forward (bf16 autocast when ``use_bf16``) -> {"loss", "action_l1"} (and "aux_loss" with ``aux_loss``;
    the loss is the L1 of the normalised chunk plus it), as tensors."""
    batch = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
        predicted = model(**{k: batch[k] for k in INPUTS})
    l1 = (predicted.float() - batch["actions"].float()).abs().mean()
    if aux_loss is None:
        return {"loss": l1, "action_l1": l1}
    aux = aux_loss(predicted, batch)
    return {"loss": l1 + aux, "action_l1": l1, "aux_loss": aux}


class ChunkDistillation(nn.Module):
    """``weight`` x the mean L1 distance between the student's chunk and the unreduced teacher's on the same batch
    (normalised actions; the teacher runs without gradient, in eval mode, under bf16 autocast when ``use_bf16``)."""

    def __init__(self, teacher: nn.Module, weight: float = 1.0, use_bf16: bool = False) -> None:
        super().__init__()
        if not weight > 0:
            raise ValueError(f"weight={weight!r} is not allowed; use a number > 0")
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        self.teacher = [teacher]  # a list: not a submodule, so never in an optimizer or a state dict
        self.weight, self.use_bf16 = weight, use_bf16

    @torch.no_grad()
    def teacher_chunk(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        device = batch["input_ids"].device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            return predict_chunk(self.teacher[0], batch).float()

    def forward(self, predicted: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.weight * (predicted.float() - self.teacher_chunk(batch)).abs().mean()


class OFTTask:
    """How an OpenVLA-OFT policy fine-tunes (module docstring); the counterpart of
    :class:`prismatic_tr.training.loop.OpenVLATask`."""

    plan_needs_model = True  # the chunk, cameras and action size come from the policy

    def plan(self, cfg: FinetuneConfig, info: DistInfo, vla: nn.Module | None) -> DataPlan:
        if getattr(vla, "action_head", None) is None:
            raise ValueError(f"vla_path={str(cfg.vla_path)!r} has no L1-regression action head; fine-tuning builds "
                             "OFT's L1 objective only (the discrete-token variant is not trained here)")
        return shared_plan(cfg, info, lambda: plan_oft_data(cfg, vla, info.world_size), lambda: _source(cfg, vla))

    def forward_module(self, inner: nn.Module, vla: nn.Module) -> nn.Module:
        return ChunkForward(vla)  # the LoRA layers are inside vla's modules, so this runs them

    def action_tokenizer(self, vla: nn.Module, processor: Any) -> None:
        return None

    def loader(self, session: Session, seed: int) -> DataLoader:
        cfg, info, vla, processor = session.cfg, session.info, session.vla, session.processor
        transform = OFTChunkTransform(processor, session.plan.stats[cfg.dataset_name], vla.oft.normalization,
                                      image_aug=ImageAugmentation() if cfg.image_aug else None)
        dataset = RLDSIterableDataset(session.plan.source, transform, train=True,
                                      shuffle_buffer_size=cfg.shuffle_buffer_size, rank=info.rank,
                                      world_size=info.world_size, seed=seed)
        pad = processor.tokenizer.pad_token_id
        return DataLoader(dataset, batch_size=cfg.batch_size, num_workers=0,
                          collate_fn=OFTCollator(int(pad if pad is not None else vla.config.pad_token_id)))

    def step(self, session: Session, batches: Iterator[dict[str, torch.Tensor]],
             aux_loss: ChunkLoss | None) -> dict[str, torch.Tensor]:
        cfg, device = session.cfg, session.info.device
        use_bf16 = cfg.autocast(device)
        return accumulated_step(session.model, batches, session.optimizer, cfg.grad_accumulation_steps,
                                lambda batch: chunk_metrics(session.model, batch, device, use_bf16, aux_loss))

    def distillation(self, session: Session, teacher: nn.Module) -> ChunkLoss:
        cfg = session.cfg
        return ChunkDistillation(teacher, weight=cfg.distill_weight, use_bf16=cfg.autocast(session.info.device))
