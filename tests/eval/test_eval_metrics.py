"""Fidelity metrics on constructed logits and features, and the two-model runner."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from prismatic_tr.eval import (
    collect_outputs,
    evaluate_fidelity,
    kl_divergence,
    linear_cka,
    margin_change,
    top1_accuracy,
    top1_agreement,
)

G = torch.Generator().manual_seed(0)
LOGITS = torch.randn(64, 10, generator=G)
FEATS = torch.randn(64, 16, generator=G)


def test_self_comparison() -> None:
    assert top1_agreement(LOGITS, LOGITS) == 1.0
    assert kl_divergence(LOGITS, LOGITS) == 0.0
    assert margin_change(LOGITS, LOGITS) == 0.0
    assert math.isclose(linear_cka(FEATS, FEATS), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize("logits_a,logits_b,agreement", [
    ([[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [1.0, 0.0]], 0.5),
    ([[1.0, 0.0, 0.0]] * 4, [[0.0, 1.0, 0.0]] * 4, 0.0),
])
def test_top1_agreement(logits_a: list, logits_b: list, agreement: float) -> None:
    assert top1_agreement(torch.tensor(logits_a), torch.tensor(logits_b)) == agreement


def test_top1_accuracy() -> None:
    logits = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert top1_accuracy(logits, torch.tensor([1, 0, 0, 0])) == 0.75


def test_kl_known_value_and_direction() -> None:
    p = torch.tensor([[0.5, 0.5]], dtype=torch.float64).log()
    q = torch.tensor([[0.25, 0.75]], dtype=torch.float64).log()
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert math.isclose(kl_divergence(p, q), expected, rel_tol=1e-9)
    assert not math.isclose(kl_divergence(q, p), expected, rel_tol=1e-3)  # KL(B || M), not symmetric
    assert math.isclose(kl_divergence(LOGITS, LOGITS + 3.0), 0.0, abs_tol=1e-12)  # shift-invariant


def test_margin_change_known_value() -> None:
    base = torch.tensor([[3.0, 1.0, 0.0], [0.0, 5.0, 1.0]])  # margins 2, 4
    reduced = torch.tensor([[2.0, 1.5, 0.0], [0.0, 5.0, 4.0]])  # margins 0.5, 1
    assert math.isclose(margin_change(base, reduced), ((0.5 - 2) + (1 - 4)) / 2)


def test_cka_invariances() -> None:
    rot, _ = torch.linalg.qr(torch.randn(16, 16, generator=G))
    assert math.isclose(linear_cka(FEATS, FEATS @ rot), 1.0, rel_tol=1e-9)
    assert math.isclose(linear_cka(FEATS, 5.0 * FEATS + 2.0), 1.0, rel_tol=1e-9)
    unrelated = torch.randn(64, 16, generator=G)
    assert linear_cka(FEATS, unrelated) < 0.6
    assert math.isclose(linear_cka(FEATS, unrelated), linear_cka(unrelated, FEATS), rel_tol=1e-9)
    assert linear_cka(FEATS, torch.ones(64, 3)) == 0.0


@pytest.mark.parametrize("fn,args", [
    (top1_agreement, (torch.zeros(4, 3), torch.zeros(5, 3))),
    (kl_divergence, (torch.zeros(4), torch.zeros(4))),
    (top1_accuracy, (torch.zeros(4, 3), torch.zeros(3, dtype=torch.long))),
    (linear_cka, (torch.zeros(4, 2), torch.zeros(3, 2))),
    (margin_change, (torch.zeros(4, 1), torch.zeros(4, 1))),
])
def test_bad_shapes_raise(fn: object, args: tuple) -> None:
    with pytest.raises(ValueError):
        fn(*args)


class _Tiny(nn.Module):
    """timm-like head split: forward_features / forward_head / get_classifier."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body, self.fc = nn.Linear(12, 8), nn.Linear(8, 5)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.flatten(1))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return x if pre_logits else self.fc(x)

    def get_classifier(self) -> nn.Module:
        return self.fc


def test_evaluate_fidelity_runner() -> None:
    data = [(torch.randn(6, 3, 2, 2, generator=G), torch.randint(0, 5, (6,), generator=G)) for _ in range(3)]
    model = _Tiny()
    same = evaluate_fidelity(model, model, data, "cpu")
    assert same["top1_agreement"] == 1.0 and same["kl_divergence"] == 0.0 and same["num_samples"] == 18
    assert math.isclose(same["linear_cka"], 1.0, rel_tol=1e-9)
    assert same["top1_accuracy"] == same["top1_accuracy_baseline"]
    other = _Tiny()
    with torch.no_grad():
        other.fc.weight.mul_(-1.0)
    diff = evaluate_fidelity(model, other, [x for x, _ in data], "cpu")  # no labels: no accuracy keys
    assert "top1_accuracy" not in diff and diff["kl_divergence"] > 0.0 and diff["top1_agreement"] < 1.0
    outs = collect_outputs(model, data)
    assert outs.logits.shape == (18, 5) and outs.features.shape == (18, 8) and outs.labels.shape == (18,)
    with pytest.raises(ValueError):
        collect_outputs(model, [])


def test_paired_difference_interval_matches_newcombes_worked_example_and_its_symmetries() -> None:
    from prismatic_tr.eval.intervals import paired_difference_interval

    # Newcombe (1998, Statistics in Medicine 17, 2635-2650), table II example (a): 36 / 12 / 2 / 0, method 10
    diff, low, high = paired_difference_interval(36, 12, 2, 0)
    assert diff == pytest.approx(0.2) and (low, high) == pytest.approx((0.0569, 0.3404), abs=5e-5)
    assert paired_difference_interval(36, 2, 12, 0) == pytest.approx((-0.2, -0.3404, -0.0569), abs=5e-5)
    same, lo, hi = paired_difference_interval(0, 0, 0, 20)   # every trial failed both times
    assert same == 0.0 and lo == pytest.approx(-hi) and 0 < hi < 0.2
    assert paired_difference_interval(5, 0, 0, 0)[1:] == pytest.approx((-0.4345, 0.4345), abs=5e-5)
    for counts in ((0, 0, 0, 0), (1, -1, 0, 0)):
        with pytest.raises(ValueError, match="paired counts"):
            paired_difference_interval(*counts)
