"""Training metrics from one forward: loss, action-token accuracy and L1 error of the decoded actions.

The logits are sliced by the real number of visual tokens, ``projector_features.shape[1]`` (K), never by
a fixed patch count, so the metrics stay right when tokens are reduced. All values stay tensors (no host
sync); masked means use sums, not boolean indexing.
"""

from __future__ import annotations

import torch

from prismatic_tr.models import ActionTokenizer


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
    pred_actions = action_tokenizer.decode_token_ids_to_actions(preds)
    true_actions = action_tokenizer.decode_token_ids_to_actions(safe_targets)
    l1 = ((pred_actions - true_actions).abs() * mask).sum() / count
    return {"action_accuracy": accuracy, "action_l1": l1}
