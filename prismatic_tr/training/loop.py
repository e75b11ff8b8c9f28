"""The fine-tuning loop, split into helpers: data loader, one forward with metrics, one optimizer step, run.

``finetune(cfg)`` is what ``vla_scripts/finetune.py`` calls. Every check (config, dataset, model, batch)
runs before the first step; only rank 0 writes files.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from prismatic_tr.data import ActionPromptTransform, ImageAugmentation, PaddedCollator, RLDSIterableDataset
from prismatic_tr.data.rlds import RLDSSource
from prismatic_tr.data.statistics import save_dataset_statistics
from prismatic_tr.models import ActionTokenizer
from prismatic_tr.models.family import family_of
from prismatic_tr.reducers.learned import LEARNED
from prismatic_tr.training import checkpoint as ckpt
from prismatic_tr.training.config import FinetuneConfig
from prismatic_tr.training.distributed import DistInfo, barrier, cleanup, init_distributed
from prismatic_tr.training.metrics import action_metrics
from prismatic_tr.training.model import (
    build_training_model,
    prompt_suffix_ids,
    trainable_parameters,
    wrap_ddp,
)
from prismatic_tr.training.oft import OFTTask
from prismatic_tr.training.preflight import DataPlan, check_vla_path, plan_data, shared_plan
from prismatic_tr.training.session import Session
from prismatic_tr.training.step import accumulated_step
from prismatic_tr.vla import token_reduction_parameters

logger = logging.getLogger("prismatic_tr.training")


@dataclass
class TrainResult:
    """What a run did: one record per optimizer step (floats), the run and last checkpoint directories."""

    history: list[dict[str, float]] = field(default_factory=list)
    run_dir: Path | None = None
    last_checkpoint: Path | None = None
    start_step: int = 0


def vla_info(vla: nn.Module, processor: Any) -> tuple[int, int, int]:
    """(unpadded vocab size, number of action bins, pad token id) of a loaded VLA."""
    vocab = int(getattr(vla, "vocab_size", None) or processor.tokenizer.vocab_size)
    n_bins = int(getattr(vla.config, "n_action_bins", 256))
    pad = processor.tokenizer.pad_token_id
    return vocab, n_bins, int(pad if pad is not None else vla.config.pad_token_id)


def build_loader(cfg: FinetuneConfig, plan: DataPlan, vla: nn.Module, processor: Any, info: DistInfo, seed: int) -> DataLoader:
    """Infinite DataLoader of padded batches for this rank."""
    vocab, n_bins, pad = vla_info(vla, processor)
    transform = ActionPromptTransform(
        processor, vocab, processor.tokenizer.eos_token_id, plan.stats[cfg.dataset_name]["action"], n_bins=n_bins,
        image_aug=ImageAugmentation() if cfg.image_aug else None, prompt_suffix_ids=prompt_suffix_ids(vla),
    )
    dataset = RLDSIterableDataset(
        plan.source, transform, train=True, shuffle_buffer_size=cfg.shuffle_buffer_size,
        rank=info.rank, world_size=info.world_size, seed=seed,
    )
    return DataLoader(dataset, batch_size=cfg.batch_size, num_workers=0,
                      collate_fn=PaddedCollator(pad, max_length=cfg.max_length))


# aux_loss(model output, batch on the device) -> a scalar added to the loss (reported as "aux_loss")
AuxLoss = Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]


def forward_with_metrics(
    model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device, action_tokenizer: ActionTokenizer,
    use_bf16: bool | None = None, aux_loss: AuxLoss | None = None,
) -> dict[str, torch.Tensor]:
    """One forward (bf16 autocast when ``use_bf16``; default: on a GPU) -> {"loss", "action_accuracy",
    "action_l1"} as tensors (and "aux_loss" with ``aux_loss``, which sees the hidden states unless it sets
    ``needs_hidden_states = False``; the loss is the action loss plus it).

    The logits are sliced with ``projector_features.shape[1]``, the real (possibly reduced) visual token count.
    """
    use_bf16 = device.type == "cuda" if use_bf16 is None else use_bf16
    batch = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
    wants_hidden = aux_loss is not None and getattr(aux_loss, "needs_hidden_states", True)
    extra = {"output_hidden_states": True} if wants_hidden else {}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            pixel_values=batch["pixel_values"].to(torch.bfloat16 if use_bf16 else torch.float32),
            labels=batch["labels"],
            **extra,
        )
    metrics = action_metrics(out.logits, batch["labels"], out.projector_features.shape[1], action_tokenizer)
    if aux_loss is None:
        return {"loss": out.loss, **metrics}
    aux = aux_loss(out, batch)
    return {"loss": out.loss + aux, "aux_loss": aux, **metrics}


def optimizer_step(
    model: nn.Module,
    batches: Iterator[dict[str, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    grad_accumulation_steps: int,
    device: torch.device,
    action_tokenizer: ActionTokenizer,
    use_bf16: bool | None = None,
    aux_loss: AuxLoss | None = None,
) -> dict[str, torch.Tensor]:
    """``grad_accumulation_steps`` micro-batches, one AdamW step; returns the mean metrics (detached tensors).

    Under DDP, gradients are synchronised only on the last micro-batch (``no_sync`` before).
    """
    def forward(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return forward_with_metrics(model, batch, device, action_tokenizer, use_bf16, aux_loss)

    return accumulated_step(model, batches, optimizer, grad_accumulation_steps, forward)


def _init_wandb(cfg: FinetuneConfig, info: DistInfo) -> Any:
    if not (cfg.use_wandb and info.is_main):
        return None
    import wandb

    return wandb.init(project=cfg.wandb_project, entity=cfg.wandb_entity, name=cfg.exp_id(), config=asdict(cfg))


# (metric, name in the log line, format): what a step logs, when the task reports it
_LOGGED = (("loss", "loss", ".4f"), ("action_accuracy", "action_acc", ".3f"), ("action_l1", "action_l1", ".4f"),
           ("aux_loss", "aux_loss", ".4f"))


def _log(records: list[dict[str, torch.Tensor]], step: int, elapsed: float, result: TrainResult, run: Any) -> None:
    """Turn pending metric tensors into floats (one host sync per log interval), log, append to history."""
    per_step = elapsed / max(len(records), 1)
    for i, rec in enumerate(records):
        row = {k: float(v) for k, v in rec.items()}
        row.update(step=float(step - len(records) + i + 1), step_time_s=per_step)
        result.history.append(row)
    last = result.history[-1]
    shown = "".join(f"  {name} {last[key]:{form}}" for key, name, form in _LOGGED if key in last)
    logger.info("step %d%s  %.2f s/step", step, shown, per_step)
    if run is not None:
        run.log({k: v for k, v in last.items() if k != "step"}, step=step)


class OpenVLATask:
    """How an OpenVLA policy fine-tunes: RLDS steps as prompt + action tokens, next-token loss on the action
    tokens, KL self-distillation. :class:`prismatic_tr.training.oft.OFTTask` is the OpenVLA-OFT counterpart."""

    plan_needs_model = False  # the data are checked before the model loads

    def plan(self, cfg: FinetuneConfig, info: DistInfo, vla: nn.Module | None) -> DataPlan:
        return shared_plan(cfg, info, lambda: plan_data(cfg, info.world_size),
                            lambda: RLDSSource(cfg.data_root_dir, cfg.dataset_name, cfg.split))

    def forward_module(self, inner: nn.Module, vla: nn.Module) -> nn.Module:
        return inner

    def action_tokenizer(self, vla: nn.Module, processor: Any) -> ActionTokenizer | None:
        vocab, n_bins, _ = vla_info(vla, processor)
        return ActionTokenizer(vocab, n_bins)

    def loader(self, session: Session, seed: int) -> DataLoader:
        return build_loader(session.cfg, session.plan, session.vla, session.processor, session.info, seed)

    def step(self, session: Session, batches: Iterator[dict[str, torch.Tensor]],
             aux_loss: AuxLoss | None) -> dict[str, torch.Tensor]:
        cfg, device = session.cfg, session.info.device
        return optimizer_step(session.model, batches, session.optimizer, cfg.grad_accumulation_steps, device,
                              session.action_tokenizer, cfg.autocast(device), aux_loss)

    def distillation(self, session: Session, teacher: nn.Module) -> AuxLoss:
        from prismatic_tr.training.distill import Distillation

        cfg = session.cfg
        return Distillation(teacher, session.action_tokenizer, weight=cfg.distill_weight,
                            temperature=cfg.distill_temperature, use_bf16=cfg.autocast(session.info.device))


# How each model family fine-tunes (prismatic_tr.models.family): its data, step and distillation.
TASKS: dict[str, type] = {"openvla": OpenVLATask, "openvla-oft": OFTTask}


def task_for(vla_path: str) -> Any:
    """The task of ``vla_path``'s family (:data:`TASKS`): :class:`OpenVLATask`, or
    :class:`prismatic_tr.training.oft.OFTTask` for an OpenVLA-OFT checkpoint."""
    return TASKS[family_of(vla_path).name]()


def prepare(cfg: FinetuneConfig, info: DistInfo) -> Session:
    """All checks and setup: vla_path, data, statistics, batch size, model, optimizer (with a learned selection's
    scorer), resume."""
    check_vla_path(cfg.vla_path)
    if cfg.token_reduction.method == LEARNED and info.world_size > 1:
        raise ValueError(f"token_reduction.method={LEARNED!r} trains its scorer outside the DDP-wrapped model, so "
                         f"its gradients would differ across the {info.world_size} processes; run it in one process")
    task = task_for(cfg.vla_path)
    plan = None if task.plan_needs_model else task.plan(cfg, info, None)
    torch.manual_seed(cfg.seed + info.rank)
    dtype = torch.bfloat16 if info.device.type == "cuda" else torch.float32
    inner, processor, vla = build_training_model(cfg, info.device, dtype)
    plan = plan if plan is not None else task.plan(cfg, info, vla)
    scorer = token_reduction_parameters(vla)  # a learned selection's scorer trains with the policy
    optimizer = torch.optim.AdamW(trainable_parameters(inner) + scorer, lr=cfg.learning_rate,
                                  weight_decay=cfg.weight_decay)
    start = ckpt.restore(inner, optimizer, cfg, Path(cfg.resume_from)) if cfg.resume_from else 0
    run_dir = Path(cfg.run_root_dir) / cfg.exp_id()
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_dataset_statistics(plan.stats, run_dir)
        _dump_config(cfg, run_dir)
    model = wrap_ddp(task.forward_module(inner, vla), info.device, info.world_size)
    return Session(cfg, info, plan, model, inner, vla, processor, optimizer, task.action_tokenizer(vla, processor),
                   run_dir, start, task)


def _dump_config(cfg: FinetuneConfig, run_dir: Path) -> None:
    import draccus

    with open(run_dir / "config.yaml", "w") as f:
        draccus.dump(cfg, f)


def run(session: Session, aux_loss: AuxLoss | None = None) -> TrainResult:
    """Train from ``session.start_step`` to ``cfg.last_step`` (``stop_at_step``, else ``max_steps``; the learning
    rate follows the schedule over ``max_steps`` either way), logging and checkpointing on rank 0; the last step is
    always logged and saved.

    ``aux_loss`` (see :func:`forward_with_metrics`) adds a training-only term; its parameters, if any, must be in
    ``session.optimizer`` already (``add_param_group``). Checkpoints hold the model only.
    """
    from tqdm import tqdm

    cfg, info = session.cfg, session.info
    result = TrainResult(run_dir=session.run_dir, start_step=session.start_step)
    task = session.task or OpenVLATask()
    loader = task.loader(session, cfg.seed + session.start_step)
    batches, wandb_run = iter(loader), _init_wandb(cfg, info)
    pending: list[dict[str, torch.Tensor]] = []
    last = cfg.last_step
    bar = tqdm(total=last, initial=session.start_step, disable=not (info.is_main and cfg.progress_bar))
    tick = time.perf_counter()
    for step in range(session.start_step + 1, last + 1):
        lr = cfg.learning_rate * cfg.lr_factor(step - 1)
        for group in session.optimizer.param_groups:
            group["lr"] = lr
        metrics = task.step(session, batches, aux_loss)
        metrics["lr"] = torch.tensor(lr)
        if info.is_main:
            pending.append(metrics)
        bar.update(1)
        if info.is_main and (step % cfg.log_every == 0 or step == last):
            _log(pending, step, time.perf_counter() - tick, result, wandb_run)
            pending, tick = [], time.perf_counter()
        if step % cfg.save_steps == 0 or step == last:
            saved_at = time.perf_counter()
            if info.is_main:
                result.last_checkpoint = ckpt.save_checkpoint(
                    cfg, session.run_dir, step, session.inner, session.optimizer, session.processor,
                    session.plan.stats, merge_dtype=session.vla.dtype,
                )
                logger.info("saved checkpoint %s", result.last_checkpoint)
            barrier(info)
            tick += time.perf_counter() - saved_at
    bar.close()
    if wandb_run is not None:
        wandb_run.finish()
    return result


def distillation_for(session: Session) -> AuxLoss | None:
    """The self-distillation loss ``cfg.distill_weight`` asks for (teacher: ``cfg.vla_path`` loaded again, every
    reduction removed; matched on action-token distributions, or on an OFT policy's continuous chunk), or None when
    the weight is 0."""
    cfg, info = session.cfg, session.info
    if not cfg.distill_weight > 0:
        return None
    from prismatic_tr.training.model import build_teacher

    teacher = build_teacher(cfg, info.device, session.vla.dtype)
    return (session.task or OpenVLATask()).distillation(session, teacher)


def finetune(cfg: FinetuneConfig) -> TrainResult:
    """Run a fine-tuning job (single process, or one rank under torchrun)."""
    info = init_distributed()
    try:
        session = prepare(cfg, info)
        return run(session, aux_loss=distillation_for(session))
    finally:
        cleanup(info)
