"""Fidelity metrics (agreement, KL, margin, CKA, Wilson intervals) as pure functions, and a runner comparing two
models."""

from prismatic_tr.eval.fidelity import ModelOutputs, collect_outputs, evaluate_fidelity, fidelity_from_outputs
from prismatic_tr.eval.intervals import wilson_interval
from prismatic_tr.eval.metrics import kl_divergence, linear_cka, margin_change, top1_accuracy, top1_agreement

__all__ = [
    "ModelOutputs",
    "collect_outputs",
    "evaluate_fidelity",
    "fidelity_from_outputs",
    "kl_divergence",
    "linear_cka",
    "margin_change",
    "top1_accuracy",
    "top1_agreement",
    "wilson_interval",
]
