"""Training metrics from one forward: loss, action-token accuracy and L1 error of the decoded actions.

The logits are sliced by the real number of visual tokens, ``projector_features.shape[1]`` (K), never by
a fixed patch count, so the metrics stay right when tokens are reduced. All values stay tensors (no host
sync); masked means use sums, not boolean indexing. The bin centres are copied to the device once per
(tokenizer bins, device, dtype) and cached, not copied from numpy at every step.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from prismatic_tr.models import ActionTokenizer


@lru_cache(maxsize=32)
def _device_constant(values: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values), dtype=dtype, device=device)


def bin_centers_on(action_tokenizer: ActionTokenizer, device: torch.device, dtype: torch.dtype = torch.float32
                   ) -> torch.Tensor:
    """The tokenizer's bin centres (n_bins - 1,) on ``device`` in ``dtype``; one cached tensor per
    (centres, device, dtype), so repeated calls dispatch no host-to-device copy."""
    values = tuple(float(v) for v in action_tokenizer.bin_centers)
    return _device_constant(values, torch.device(device), dtype)


def decode_to_centers(token_ids: torch.Tensor, action_tokenizer: ActionTokenizer) -> torch.Tensor:
    """(...,) token ids -> (...,) normalised actions (float32 bin centres), as
    ``ActionTokenizer.decode_token_ids_to_actions`` maps them (tested equal), from the cached centres."""
    centers = bin_centers_on(action_tokenizer, token_ids.device)
    idx = (action_tokenizer.vocab_size - token_ids.long() - 1).clamp(0, action_tokenizer.n_bins - 2)
    return centers[idx]


def action_logits_and_targets(
    logits: torch.Tensor, labels: torch.Tensor, num_visual_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Align next-token logits with text labels.

    Args:
        logits: (B, L + K, V) for a multimodal sequence [BOS, K visual tokens, text[1:]].
        labels: (B, L) text labels (-100 where ignored).
        num_visual_tokens: K = ``projector_features.shape[1]``.
    Returns:
        logits (B, L - 1, V) predicting ``labels[:, 1:]`` and those targets (B, L - 1).
    """
    expected = labels.shape[1] + num_visual_tokens
    if logits.shape[1] != expected:
        raise ValueError(
            f"logits have {logits.shape[1]} positions; expected labels ({labels.shape[1]}) + visual tokens "
            f"({num_visual_tokens}) = {expected}"
        )
    return logits[:, num_visual_tokens:-1], labels[:, 1:]


def action_metrics(
    logits: torch.Tensor, labels: torch.Tensor, num_visual_tokens: int, action_tokenizer: ActionTokenizer
) -> dict[str, torch.Tensor]:
    """Accuracy of the predicted action tokens and L1 error of their bin centres (normalised action space).

    Args:
        logits: (B, L + K, V); labels: (B, L); num_visual_tokens: K.
    Returns:
        {"action_accuracy": () tensor, "action_l1": () tensor} over the positions whose target is an action token.
    """
    pred_logits, targets = action_logits_and_targets(logits, labels, num_visual_tokens)
    preds = pred_logits.argmax(dim=-1)
    begin, end = action_tokenizer.action_token_begin_idx, action_tokenizer.vocab_size
    mask = ((targets >= begin) & (targets < end)).float()
    count = mask.sum().clamp(min=1.0)
    accuracy = ((preds == targets).float() * mask).sum() / count
    safe_targets = torch.where(mask.bool(), targets, torch.full_like(targets, begin))
    pred_actions = decode_to_centers(preds, action_tokenizer)
    true_actions = decode_to_centers(safe_targets, action_tokenizer)
    l1 = ((pred_actions - true_actions).abs() * mask).sum() / count
    return {"action_accuracy": accuracy, "action_l1": l1}
