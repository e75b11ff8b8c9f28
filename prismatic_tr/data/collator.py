"""Padding collator for OpenVLA training examples (right padding, as OpenVLA)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from prismatic_tr.models import IGNORE_INDEX


# follows OpenVLA c8f03f48 prismatic/util/data_utils.py PaddedCollatorForActionPrediction (MIT, see NOTICE): right
# padding, labels padded with IGNORE_INDEX.
@dataclass
class PaddedCollator:
    """List of examples -> batch.

    In: each {"pixel_values": (C, H, W), "input_ids": (L_i,), "labels": (L_i,)}.
    Out: {"pixel_values": (B, C, H, W), "input_ids": (B, L) padded with ``pad_token_id``,
    "labels": (B, L) padded with -100, "attention_mask": (B, L) bool, True on real tokens}, L = max L_i
    (cut to ``max_length`` when set).
    """

    pad_token_id: int
    max_length: int | None = None

    def __post_init__(self) -> None:
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length={self.max_length} must be >= 2 or None")

    def __call__(self, examples: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        lengths = [int(e["input_ids"].shape[0]) for e in examples]
        width = max(lengths)
        input_ids = torch.full((len(examples), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(examples), width), dtype=torch.bool)
        for row, (ex, n) in enumerate(zip(examples, lengths, strict=False)):
            input_ids[row, :n], labels[row, :n], mask[row, :n] = ex["input_ids"], ex["labels"], True
        if self.max_length is not None:
            input_ids, labels, mask = (t[:, : self.max_length] for t in (input_ids, labels, mask))
        pixel_values = torch.stack([e["pixel_values"] for e in examples])
        return {"pixel_values": pixel_values, "input_ids": input_ids, "labels": labels, "attention_mask": mask}
