"""Self-distillation for fine-tuning under reduction: the reduced student matches the unreduced policy.

Fine-tuning on demonstrations alone (behaviour cloning) teaches the reduced policy the demonstrator, not the
policy it replaces: on the bundled policy, LoRA under ``vision diverse 0.1@0.25`` recovered little and the same
weights without reduction fell from 98 % to 84 % (``benchmarks/results/finetune_reduced/``). Here the teacher is
the checkpoint being fine-tuned, loaded a second time without any reduction and frozen; the student (the model
being trained, reduction attached) pays ``weight`` times the KL divergence from the teacher's next-token
distribution to its own at every action-token position, on top of the action loss. What is matched is the
policy's behaviour on the demonstrations' states, including where the policy and the demonstrator differ.

Memory: the teacher is a second copy of the model (for OpenVLA-7B in bf16, 15 GB more on the GPU).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from prismatic_tr.models import ActionTokenizer
from prismatic_tr.training.metrics import action_logits_and_targets


def action_position_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, targets: torch.Tensor,
    action_tokenizer: ActionTokenizer, temperature: float = 1.0,
) -> torch.Tensor:
    """Mean KL(teacher || student) over the positions whose target is an action token.

    Args:
        student_logits, teacher_logits: (B, T, V) next-token logits, already aligned with ``targets``
            (:func:`prismatic_tr.training.metrics.action_logits_and_targets` on each model's own visual count).
        targets: (B, T) label ids (-100 where ignored).
        temperature: both distributions are softened by it; the KL is scaled by temperature**2 (Hinton et al.,
            2015) so its gradient keeps its size.
    Returns:
        () float32 tensor; 0 when no position holds an action token. No host sync (masked sums).
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} must have the same shape after alignment")
    begin, end = action_tokenizer.action_token_begin_idx, action_tokenizer.vocab_size
    mask = ((targets >= begin) & (targets < end)).float()
    log_s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    per_position = (log_t.exp() * (log_t - log_s)).sum(dim=-1)  # (B, T)
    return (per_position * mask).sum() / mask.sum().clamp(min=1.0) * temperature**2


class Distillation(nn.Module):
    """``loss(out, batch)`` for :func:`prismatic_tr.training.run`'s ``aux_loss``: ``weight`` x
    :func:`action_position_kl` between ``out`` (the student's forward) and the teacher run on the same batch.

    The teacher runs without gradient in eval mode, under bf16 autocast when ``use_bf16``; each model's logits are
    sliced by its own visual token count (``projector_features.shape[1]``), so text positions line up whatever the
    student keeps.
    """

    def __init__(self, teacher: nn.Module, action_tokenizer: ActionTokenizer, weight: float = 1.0,
                 temperature: float = 1.0, use_bf16: bool = False) -> None:
        super().__init__()
        if not weight > 0:
            raise ValueError(f"weight={weight!r} is not allowed; use a number > 0")
        if not temperature > 0:
            raise ValueError(f"temperature={temperature!r} is not allowed; use a number > 0")
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        self.needs_hidden_states = False  # the student's logits are enough
        self.teacher = [teacher]  # a list: not a submodule, so never in an optimizer or a state dict
        self.action_tokenizer, self.weight, self.temperature, self.use_bf16 = (
            action_tokenizer, weight, temperature, use_bf16)

    @torch.no_grad()
    def teacher_logits(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        """(B, L + K_t, V) teacher logits for ``batch`` (on the device) and the teacher's visual count K_t."""
        teacher = self.teacher[0]
        device = batch["input_ids"].device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            out = teacher(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          pixel_values=batch["pixel_values"].to(torch.bfloat16 if self.use_bf16 else torch.float32))
        return out.logits, int(out.projector_features.shape[1])

    def forward(self, out: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        t_logits, t_visual = self.teacher_logits(batch)
        t_aligned, targets = action_logits_and_targets(t_logits, batch["labels"], t_visual)
        s_aligned, _ = action_logits_and_targets(out.logits, batch["labels"], out.projector_features.shape[1])
        kl = action_position_kl(s_aligned, t_aligned, targets, self.action_tokenizer, self.temperature)
        return self.weight * kl
