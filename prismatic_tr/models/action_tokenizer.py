"""Action discretisation as in OpenVLA, and q01/q99 (un)normalisation; numpy or torch in, same type out.

Bins: ``n_bins`` edges ``linspace(min_action, max_action, n_bins)``; an action maps to
``digitize(clip(a), edges)`` in [1, n_bins] and to the token id ``vocab_size - digitize``, so the action
tokens are the last ``n_bins`` ids of the unpadded vocabulary. Decoding inverts this onto the ``n_bins - 1``
bin centres: ``centre[clip(vocab_size - id - 1, 0, n_bins - 2)]`` (OpenVLA's convention).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
import torch

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


# follows OpenVLA c8f03f48 prismatic/vla/action_tokenizer.py ActionTokenizer (MIT, see NOTICE): the same bins and
# token ids, so OpenVLA checkpoints decode to the same actions.
class ActionTokenizer:
    """Maps normalised actions in [min_action, max_action] to token ids and back.

    Args:
        vocab_size_or_tokenizer: the unpadded vocabulary size (Llama-2: 32000), or a tokenizer whose
            ``vocab_size`` (added tokens such as <PAD> excluded) is used and which ``__call__`` decodes with.
        n_bins: number of bin edges (OpenVLA: 256).
    """

    def __init__(
        self,
        vocab_size_or_tokenizer: Any,
        n_bins: int = 256,
        min_action: float = -1.0,
        max_action: float = 1.0,
    ) -> None:
        if isinstance(vocab_size_or_tokenizer, (int, np.integer)):
            self.tokenizer, self.vocab_size = None, int(vocab_size_or_tokenizer)
        else:
            self.tokenizer, self.vocab_size = vocab_size_or_tokenizer, int(vocab_size_or_tokenizer.vocab_size)
        if n_bins < 2 or n_bins > self.vocab_size:
            raise ValueError(f"n_bins={n_bins}; must be in [2, vocab_size={self.vocab_size}]")
        if not min_action < max_action:
            raise ValueError(f"min_action={min_action} must be < max_action={max_action}")
        self.n_bins, self.min_action, self.max_action = n_bins, float(min_action), float(max_action)
        self.bins = np.linspace(min_action, max_action, n_bins)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0
        self.action_token_begin_idx = self.vocab_size - n_bins  # first id used for actions

    def encode(self, actions: ArrayT) -> ArrayT:
        """(..., A) normalised actions -> (..., A) token ids (int64) in [vocab_size - n_bins, vocab_size - 1]."""
        if isinstance(actions, torch.Tensor):
            edges = torch.as_tensor(self.bins, dtype=torch.float64, device=actions.device)
            clipped = actions.double().clamp(self.min_action, self.max_action)
            return self.vocab_size - torch.bucketize(clipped, edges, right=True)
        clipped = np.clip(np.asarray(actions, dtype=np.float64), self.min_action, self.max_action)
        return (self.vocab_size - np.digitize(clipped, self.bins)).astype(np.int64)

    def decode_token_ids_to_actions(self, token_ids: ArrayT) -> ArrayT:
        """(..., A) token ids -> (..., A) normalised actions (bin centres; float32 tensor or float64 array)."""
        if isinstance(token_ids, torch.Tensor):
            centers = torch.as_tensor(self.bin_centers, dtype=torch.float32, device=token_ids.device)
            idx = (self.vocab_size - token_ids.long() - 1).clamp(0, self.n_bins - 2)
            return centers[idx]
        idx = np.clip(self.vocab_size - np.asarray(token_ids, dtype=np.int64) - 1, 0, self.n_bins - 2)
        return self.bin_centers[idx]

    def __call__(self, actions: np.ndarray) -> str | list[str]:
        """Actions (A,) or (B, A) -> the decoded token string(s) (needs a tokenizer), as OpenVLA's does."""
        if self.tokenizer is None:
            raise ValueError(
                "ActionTokenizer was built from a vocab size; pass a tokenizer to decode to text"
            )
        ids = self.encode(
            np.asarray(actions)
        )  # decode arrays, not lists: transformers 4.40 imports TF for lists
        if ids.ndim == 1:
            return self.tokenizer.decode(ids)
        return self.tokenizer.batch_decode(ids)


def _stats_arrays(stats: Mapping[str, Any], like: ArrayT) -> tuple[Any, Any, Any]:
    """q01, q99, mask from ``stats`` (an ``{"q01", "q99", "mask"?}`` dict, or one with an "action" entry)."""
    if "action" in stats and "q01" not in stats:
        stats = stats["action"]
    for key in ("q01", "q99"):
        if key not in stats:
            raise ValueError(f"normalisation stats lack {key!r}; got keys {sorted(stats)}")
    low, high = np.asarray(stats["q01"], dtype=np.float64), np.asarray(stats["q99"], dtype=np.float64)
    mask = np.asarray(stats.get("mask", np.ones_like(low, dtype=bool)), dtype=bool)
    if isinstance(like, torch.Tensor):
        dt = like.dtype if like.is_floating_point() else torch.float32
        conv = lambda a: torch.as_tensor(a, device=like.device)  # noqa: E731
        return conv(low).to(dt), conv(high).to(dt), conv(mask)
    return low, high, mask


def normalize_actions(actions: ArrayT, stats: Mapping[str, Any]) -> ArrayT:
    """(..., A) raw actions -> [-1, 1] with q01/q99 bounds (clipped); dimensions with mask False pass through."""
    low, high, mask = _stats_arrays(stats, actions)
    if isinstance(actions, torch.Tensor):
        norm = (2 * (actions - low) / (high - low + 1e-8) - 1).clamp(-1, 1)
        return torch.where(mask, norm, actions)
    actions = np.asarray(actions, dtype=np.float64)
    return np.where(mask, np.clip(2 * (actions - low) / (high - low + 1e-8) - 1, -1, 1), actions)


# follows OpenVLA c8f03f48 prismatic/extern/hf/modeling_prismatic.py predict_action (MIT, see NOTICE): q01/q99 bounds
# and mask, so actions equal OpenVLA's.
def unnormalize_actions(normalized: ArrayT, stats: Mapping[str, Any]) -> ArrayT:
    """(..., A) actions in [-1, 1] -> raw scale: 0.5 (a + 1)(q99 - q01) + q01 where mask, else unchanged."""
    low, high, mask = _stats_arrays(stats, normalized)
    if isinstance(normalized, torch.Tensor):
        return torch.where(mask, 0.5 * (normalized + 1) * (high - low) + low, normalized)
    normalized = np.asarray(normalized, dtype=np.float64)
    return np.where(mask, 0.5 * (normalized + 1) * (high - low) + low, normalized)
