"""Fidelity metrics between a baseline model B and a reduced model M on the same inputs.

Pure functions on tensors; every function returns a Python float. Logits are ``(N, C)`` (N samples,
C classes), features are ``(N, D)``. Computations run in float64 on the inputs' device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["kl_divergence", "linear_cka", "margin_change", "top1_accuracy", "top1_agreement"]


def _check_logits(name: str, logits: torch.Tensor) -> None:
    if logits.dim() != 2 or logits.shape[0] == 0 or logits.shape[1] < 2:
        raise ValueError(f"{name} must have shape (N, C) with N >= 1 and C >= 2, got {tuple(logits.shape)}")


def _check_pair(logits_a: torch.Tensor, logits_b: torch.Tensor) -> None:
    _check_logits("logits_a", logits_a)
    _check_logits("logits_b", logits_b)
    if logits_a.shape != logits_b.shape:
        raise ValueError(f"logit shapes differ: {tuple(logits_a.shape)} vs {tuple(logits_b.shape)}; must be equal")


def top1_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of rows whose argmax equals the label. logits (N, C), labels (N,) integer class ids."""
    _check_logits("logits", logits)
    if labels.shape != (logits.shape[0],):
        raise ValueError(f"labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}")
    return (logits.argmax(dim=-1) == labels.to(logits.device)).double().mean().item()


def top1_agreement(logits_a: torch.Tensor, logits_b: torch.Tensor) -> float:
    """Fraction of rows where the two models pick the same class. logits_a, logits_b (N, C)."""
    _check_pair(logits_a, logits_b)
    return (logits_a.argmax(dim=-1) == logits_b.argmax(dim=-1)).double().mean().item()


def kl_divergence(logits_p: torch.Tensor, logits_q: torch.Tensor) -> float:
    """Mean over rows of KL(softmax(p) || softmax(q)) in nats (p = baseline, q = reduced). (N, C) each."""
    _check_pair(logits_p, logits_q)
    log_p = F.log_softmax(logits_p.double(), dim=-1)
    log_q = F.log_softmax(logits_q.double(), dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(dim=-1)
    return kl.clamp_min(0.0).mean().item()


def _margin(logits: torch.Tensor) -> torch.Tensor:
    """(N, C) -> (N,): top-1 logit minus runner-up logit."""
    top2 = logits.double().topk(2, dim=-1).values
    return top2[:, 0] - top2[:, 1]


def margin_change(logits_base: torch.Tensor, logits_reduced: torch.Tensor) -> float:
    """Mean (top-1 minus runner-up logit) of the reduced model minus that of the baseline. (N, C) each.

    Negative values mean the reduced model is less confident than the baseline.
    """
    _check_pair(logits_base, logits_reduced)
    return (_margin(logits_reduced) - _margin(logits_base)).mean().item()


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Linear centred kernel alignment (Kornblith et al., 2019) of features x (N, D1) and y (N, D2).

    ``||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)`` with column-centred Xc, Yc; in [0, 1], invariant
    to orthogonal transforms and isotropic scaling of either input. Returns 0.0 when either input is
    constant (zero variance).
    """
    if x.dim() != 2 or y.dim() != 2 or x.shape[0] != y.shape[0] or x.shape[0] < 2:
        raise ValueError(f"x and y must be (N, D1) and (N, D2) with equal N >= 2, got {tuple(x.shape)}, {tuple(y.shape)}")
    xc = x.double() - x.double().mean(dim=0, keepdim=True)
    yc = y.double().to(xc.device) - y.double().to(xc.device).mean(dim=0, keepdim=True)
    cross = (yc.T @ xc).norm() ** 2
    denom = (xc.T @ xc).norm() * (yc.T @ yc).norm()
    if denom.item() == 0.0:
        return 0.0
    return (cross / denom).item()
