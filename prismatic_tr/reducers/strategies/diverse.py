"""``diverse`` and ``salient_diverse``: keep tokens that cover the image's feature space (max-min selection).

Greedy max-min (farthest-point) selection in cosine distance, the rule DivPrune (Alvar et al., CVPR 2025)
applies to a VLM's visual tokens; written from the paper, no code taken. Start from the most salient token (the
one least like the mean, :func:`~prismatic_tr.reducers.strategies.saliency.mean_dissimilarity`), then add, K - 1
times, the token whose nearest already-kept token is farthest. No region of feature space is left without a
kept token, so a small object survives even where a top-K of one score would spend every slot on one large one.
``salient_diverse`` weighs each candidate's distance by its saliency, so the cover favours what stands out.

Static shapes: K steps of a (B, N) update each (one matrix-vector product per step); no host sync; compiles with
``fullgraph=True`` (the loop unrolls K times, so compile time grows with K).
"""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig
from prismatic_tr.reducers.strategies.saliency import mean_dissimilarity
from prismatic_tr.reducers.strategies.selection import count_by_ratio, register_selection


def max_min_order(patches: torch.Tensor, k: int, weight: torch.Tensor | None = None,
                  first_key: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy max-min selection: (B, N, D) -> (B, N) fp32 scores whose top ``k`` are the ``k`` tokens picked.

    Args:
        patches: (B, N, D) tokens.
        k: tokens to pick, 1 <= k <= N (static).
        weight: (B, N) non-negative per-token weight; a candidate's gain is ``weight * distance to the nearest
            kept token`` (None: 1).
        first_key: (B, N): the first pick is the token where it is highest (None: ``weight``, or the saliency
            when there is no weight).

    Returns:
        (B, N) scores: ``k - step`` for the token picked at ``step`` (0 .. k - 1), ``-1`` for tokens not picked,
        so ``top_indices(scores, k)`` recovers the picks. Cosine distance ``1 - cos`` in fp32.
    """
    x = torch.nn.functional.normalize(patches.float(), dim=-1)
    b, n, _ = x.shape
    if first_key is None:
        first_key = weight if weight is not None else mean_dissimilarity(patches)
    pick = first_key.argmax(dim=1)                                   # (B,)
    rows = torch.arange(b, device=x.device)
    scores = torch.full((b, n), -1.0, device=x.device)
    nearest = torch.full((b, n), 2.0, device=x.device)              # distance to the nearest kept token
    # each step's score as a device tensor: a Python number assigned through an index is copied from host memory,
    # which a CUDA-graph capture refuses (torch 2.11)
    values = torch.arange(k, 0, -1, dtype=torch.float32, device=x.device)
    for step in range(k):
        scores[rows, pick] = values[step]
        if step == k - 1:
            break
        chosen = x[rows, pick]                                       # (B, D)
        dist = 1.0 - torch.bmm(x, chosen.unsqueeze(-1)).squeeze(-1)  # (B, N)
        nearest = torch.minimum(nearest, dist)
        gain = nearest if weight is None else nearest * weight
        gain = gain.masked_fill(scores >= 0, -1.0)                   # never pick a token twice
        pick = gain.argmax(dim=1)
    return scores


@register_selection("diverse")
def score_diverse(
    patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None = None
) -> torch.Tensor:
    """(B, N, D) -> (B, N): :func:`max_min_order` scores; the K picked are kept, in spatial order."""
    return max_min_order(patches, count_by_ratio(patches.shape[1], cfg))


@register_selection("salient_diverse")
def score_salient_diverse(
    patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None = None
) -> torch.Tensor:
    """(B, N, D) -> (B, N): :func:`max_min_order` with each candidate's distance weighed by its saliency."""
    return max_min_order(patches, count_by_ratio(patches.shape[1], cfg), weight=mean_dissimilarity(patches))
