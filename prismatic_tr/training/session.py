"""What a fine-tuning run holds once it is set up: :class:`Session`, apart from the loop
(:mod:`prismatic_tr.training.loop`) so that each family's task (:mod:`prismatic_tr.training.oft`) can take one
without importing the loop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prismatic_tr.models import ActionTokenizer
from prismatic_tr.training.config import FinetuneConfig
from prismatic_tr.training.distributed import DistInfo
from prismatic_tr.training.preflight import DataPlan


@dataclass
class Session:
    """Everything a run needs, built (and validated) before the first step."""

    cfg: FinetuneConfig
    info: DistInfo
    plan: DataPlan
    model: nn.Module          # what runs the training forward, DDP-wrapped when world_size > 1
    inner: nn.Module          # what is trained (PeftModel or VLA), without DDP (saving)
    vla: nn.Module            # the underlying VLA (config, vocabulary)
    processor: Any
    optimizer: torch.optim.Optimizer
    action_tokenizer: ActionTokenizer | None  # OpenVLA's action tokens (None for an OFT policy: continuous)
    run_dir: Path
    start_step: int
    task: Any = None          # the policy kind's data, step and distillation (None: OpenVLATask)
