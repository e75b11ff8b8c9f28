"""``saliency``: keep the tokens least like the image's mean token (what stands out from the background)."""

from __future__ import annotations

import torch

from prismatic_tr.reducers.config import ReducerConfig
from prismatic_tr.reducers.strategies.selection import register_selection


def mean_dissimilarity(patches: torch.Tensor) -> torch.Tensor:
    """(B, N, D) -> (B, N) fp32: ``1 - cos(x_i, mean_j x_j)``, in [0, 2]; high where a token differs from the
    row's mean token.

    On a tabletop frame most patches show the table, so the mean token is the background's and the tokens far
    from it are the objects and the gripper. This is ``attention_score``'s similarity turned around: that
    strategy keeps the background (see docs/results/openvla.md).
    """
    x = patches.float()
    mean = x.mean(dim=1, keepdim=True)
    dots = torch.bmm(x, mean.transpose(1, 2)).squeeze(-1)
    norms = torch.linalg.vector_norm(x, dim=-1) * torch.linalg.vector_norm(mean, dim=-1)
    return 1.0 - dots / norms.clamp_min(1e-12)


@register_selection("saliency")
def score_saliency(
    patches: torch.Tensor, cfg: ReducerConfig, rng: torch.Tensor | torch.Generator | None = None
) -> torch.Tensor:
    """(B, N, D) -> (B, N) scores: :func:`mean_dissimilarity`; the K highest are kept, in spatial order."""
    return mean_dissimilarity(patches)
