"""``learned``: the max-min cover of ``diverse``, each token weighed by a small scorer trained with the policy.

``diverse`` covers the image's feature space evenly: every object survives, but so does every kind of
background, and at keep 0.1 the cover spends most of its slots on the table. Here a linear scorer on the
layer-normalised token, ``s_i = w . LN(x_i) + b``, gives every token a weight ``exp(s_i)``, and the cover picks
by ``weight x distance to the nearest kept token`` (the first pick: ``weight x saliency``). With ``w = 0`` every
weight is 1 and the picks are exactly ``diverse``'s, so fine-tuning starts from the measured default.

Training (the idea LightVLA (arXiv 2509.12594) and DynamicViT use: a hard selection forward, a soft one
backward; written here for a static-shape cover): the selection itself has no gradient, so each kept token is
multiplied by a straight-through gate ``1 + s_i - stop_grad(s_i)``, exactly 1 in value (the forward is the
inference forward, bit for bit) and ``d gate / d s_i = 1``: the loss tells the scorer whether each kept token
should weigh more (be picked first, its look-alikes too) or less (leave its slot to another region).

The scorer and the cover compute in float32 with autocast off, so a bfloat16-autocast training forward and a
float32 inference forward given the same tokens pick the same ones. The scorer's ``C + 1`` numbers live with the
reduction setting (``prismatic_tr.vla.Setting.scorer``, saved in a checkpoint's ``config.token_reduction``), never in
the model's own modules or ``state_dict``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from prismatic_tr.reducers.strategies.diverse import max_min_order
from prismatic_tr.reducers.strategies.saliency import mean_dissimilarity

LEARNED = "learned"


def check_scorer_values(values: Sequence[float], dim: int | None = None) -> list[float]:
    """``values`` as a list of finite floats ([w_1 .. w_C, b]); ValueError naming what is wrong, and the length
    ``dim + 1`` when ``dim`` is given."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"scorer={values!r} is not allowed; use a list of C + 1 numbers (weights, then bias)")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"scorer holds {v!r}; every value must be a finite number")
        out.append(float(v))
    if dim is not None and len(out) != dim + 1:
        raise ValueError(f"scorer has {len(out)} values; this model's scoring tower is {dim} wide, so it needs "
                         f"{dim + 1} (weights, then bias)")
    if len(out) < 2:
        raise ValueError(f"scorer has {len(out)} values; it needs C + 1 >= 2 (weights, then bias)")
    return out


class CoverScorer(nn.Module):
    """Per-token log-weights for the max-min cover (module docstring). Parameters: ``weight`` (C,), ``bias`` ()."""

    def __init__(self, dim: int, values: Sequence[float] | None = None) -> None:
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim={dim!r} is not allowed; use the token width, an integer >= 1")
        init = torch.zeros(dim + 1) if values is None else torch.tensor(check_scorer_values(values, dim))
        self.weight = nn.Parameter(init[:dim].clone())
        self.bias = nn.Parameter(init[dim].clone())

    def log_weights(self, patches: torch.Tensor) -> torch.Tensor:
        """(B, N, C) -> (B, N) fp32 ``w . LN(x) + b``, in float32 under any autocast (:func:`_float32`)."""
        with _float32(patches):
            x = F.layer_norm(patches.float(), patches.shape[-1:])
            return x @ self.weight.to(x.device, torch.float32) + self.bias.to(x.device, torch.float32)

    def order(self, patches: torch.Tensor, k: int, log_weights: torch.Tensor) -> torch.Tensor:
        """(B, N, C), K, (B, N) -> (B, N) scores whose top K are the weighted cover's picks (no gradient), in
        float32 under any autocast."""
        with torch.no_grad(), _float32(patches):
            x, log_weights = patches.float(), log_weights.float()
            weight = torch.exp(log_weights - log_weights.amax(dim=1, keepdim=True))  # (0, 1], same order
            return max_min_order(x, k, weight=weight, first_key=weight * mean_dissimilarity(x))

    def values(self) -> list[float]:
        """The scorer as ``prismatic_tr.vla.Setting.scorer`` stores it: [w_1 .. w_C, b]."""
        return [float(v) for v in torch.cat([self.weight.detach().flatten(), self.bias.detach().view(1)]).cpu()]


def _float32(patches: torch.Tensor) -> torch.autocast:
    """Autocast off on ``patches``' device: the scorer and the cover run in float32 whatever the caller's autocast
    (a bfloat16 matmul would round the log-weights and distances, and training under autocast would pick other
    tokens than inference in float32)."""
    return torch.autocast(device_type=patches.device.type, enabled=False)


def straight_through_gate(log_weights_kept: torch.Tensor) -> torch.Tensor:
    """(B, K) log-weights of the kept tokens -> (B, K) gate, exactly 1 in value, gradient 1 per log-weight."""
    return 1.0 + (log_weights_kept - log_weights_kept.detach())
