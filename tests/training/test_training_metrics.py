"""Training metrics keep their constants on the device: the bin centres are copied once, then reused."""

from __future__ import annotations

import pytest
import torch

from prismatic_tr.bench.measure.ops import count_dispatched_ops
from prismatic_tr.models import ActionTokenizer
from prismatic_tr.training import metrics
from prismatic_tr.training.metrics import action_metrics, bin_centers_on, decode_to_centers

VOCAB, K = 1024, 4


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.tensor([[-100, -100, 900, 1000, 1023, 2], [-100, -100, -100, 800, 801, 2]])
    logits = torch.randn(2, labels.shape[1] + K, VOCAB + 64, generator=torch.Generator().manual_seed(0))
    return logits, labels


@pytest.mark.parametrize("n_bins", [256, 16])
def test_decode_matches_the_tokenizer(n_bins: int) -> None:
    tok = ActionTokenizer(VOCAB, n_bins=n_bins)
    ids = torch.arange(VOCAB - n_bins - 3, VOCAB + 3)  # below, inside and above the action range
    assert torch.equal(decode_to_centers(ids, tok), tok.decode_token_ids_to_actions(ids))


def test_centres_are_cached_per_device_and_dtype() -> None:
    tok = ActionTokenizer(VOCAB)
    a = bin_centers_on(tok, torch.device("cpu"))
    assert bin_centers_on(tok, torch.device("cpu")) is a
    assert bin_centers_on(ActionTokenizer(VOCAB), torch.device("cpu")) is a  # same bins, same tensor
    assert bin_centers_on(tok, torch.device("cpu"), torch.float64) is not a
    assert bin_centers_on(ActionTokenizer(VOCAB, n_bins=16), torch.device("cpu")) is not a


def test_metric_step_copies_no_host_constants_after_the_first() -> None:
    """``aten.lift_fresh`` is a tensor made from host (numpy) data: the first step makes one, later none."""
    tok = ActionTokenizer(VOCAB)
    logits, labels = _batch()
    metrics._device_constant.cache_clear()
    first = count_dispatched_ops(action_metrics, logits, labels, K, tok)
    later = count_dispatched_ops(action_metrics, logits, labels, K, tok)
    assert first["aten.lift_fresh"] >= 1
    assert later["aten.lift_fresh"] == 0, later
