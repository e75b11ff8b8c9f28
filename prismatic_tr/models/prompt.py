"""Preparing a batch of prompts for generation: OpenVLA's empty-token rule and padding, without host syncs.

OpenVLA's ``predict_action`` appends Llama-2's empty token (29871) after the prompt unless it is already the
last token (the model was trained with it). Rows may be padded (left or right). The result is a
:class:`Prompt`: token ids with every row's real tokens first (BOS at position 0, where the image goes) and a
key mask, or no mask at all when no row is padded.

Two equivalent paths, chosen by where the tensors live (never by their values, :func:`reads_on_host`):

* host tensors (CPU): the rows are read with numpy (no device, nothing to wait for), the token appended where
  missing, and the mask dropped when every row is full;
* device tensors: static shapes on the device: the token is appended to every row and marked as padding in
  rows that already end with it; the key mask is kept (whether a row is padded would take a host read). It
  costs nothing in the prefill (never masked, see :mod:`.generation`) and a mask in each decode step.

Tests force the device path on the CPU (monkeypatching :func:`reads_on_host`) to hold it to the same
no-host-sync guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .generation import to_right_padding


@dataclass
class Prompt:
    """``ids`` (B, L), real tokens first in every row; ``key_mask`` (B, L) bool, or None when nothing is padded."""

    ids: torch.Tensor
    key_mask: torch.Tensor | None


def _host_prompt(ids: np.ndarray, mask: np.ndarray, append: int | None, pad_id: int) -> Prompt:
    rows = [row[m.astype(bool)] for row, m in zip(ids, mask, strict=True)]
    empty = [i for i, row in enumerate(rows) if len(row) == 0]
    if empty:
        raise ValueError(f"prompt rows {empty} have no real token (attention_mask all 0)")
    if append is not None:
        rows = [row if row[-1] == append else np.append(row, append) for row in rows]
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), pad_id, dtype=np.int64)
    keys = np.zeros((len(rows), width), dtype=bool)
    for i, row in enumerate(rows):
        out[i, : len(row)], keys[i, : len(row)] = row, True
    key_mask = None if keys.all() else torch.from_numpy(keys)
    return Prompt(torch.from_numpy(out), key_mask)


def _device_prompt(ids: torch.Tensor, mask: torch.Tensor, append: int | None) -> Prompt:
    key_mask, ids = to_right_padding(mask.bool(), ids)
    if append is not None:
        last = ids.gather(1, (key_mask.sum(dim=1, keepdim=True) - 1).clamp(min=0))
        ids = torch.cat([ids, torch.full_like(ids[:, :1], append)], dim=1)
        key_mask = torch.cat([key_mask, last != append], dim=1)
        key_mask, ids = to_right_padding(key_mask, ids)
    return Prompt(ids, key_mask)


def reads_on_host(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> bool:
    """Whether the prompt's rows can be read without waiting for a device: every tensor lives on the CPU."""
    return input_ids.device.type == "cpu" and (attention_mask is None or attention_mask.device.type == "cpu")


# follows OpenVLA c8f03f48 prismatic/extern/hf/modeling_prismatic.py predict_action (MIT, see NOTICE): the empty token
# 29871 appended unless it is last, as the checkpoints were trained.
def prepare_prompt(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, append_token: int | None, pad_token_id: int
) -> Prompt:
    """Prompt ids (B, L) and optional mask (B, L) -> :class:`Prompt` (see the module docstring).

    ``append_token``: OpenVLA's empty token, appended after the last real token of each row where missing
    (None: nothing appended). ``pad_token_id`` fills padded positions.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; expected (batch, length)")
    if attention_mask is not None and attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids "
                         f"{tuple(input_ids.shape)}; they must match")
    if reads_on_host(input_ids, attention_mask):
        mask = np.ones(input_ids.shape, dtype=bool) if attention_mask is None else attention_mask.numpy() != 0
        return _host_prompt(input_ids.numpy(), mask, append_token, pad_token_id)
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.to(input_ids.device)
    return _device_prompt(input_ids, mask, append_token)
