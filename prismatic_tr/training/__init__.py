"""LoRA fine-tuning of OpenVLA-style models with token reduction (used by ``vla_scripts/finetune.py``).

Imports peft / bitsandbytes / tensorflow lazily, inside the functions that need them.
"""

from prismatic_tr.training.config import FinetuneConfig, TokenReductionConfig
from prismatic_tr.training.loop import (
    TrainResult,
    finetune,
    forward_with_metrics,
    optimizer_step,
    prepare,
    run,
)
from prismatic_tr.training.metrics import action_logits_and_targets, action_metrics

__all__ = [
    "FinetuneConfig",
    "TokenReductionConfig",
    "TrainResult",
    "action_logits_and_targets",
    "action_metrics",
    "finetune",
    "forward_with_metrics",
    "optimizer_step",
    "prepare",
    "run",
]
