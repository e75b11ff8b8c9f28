"""Pure tensor algorithms of prismatic_tr.vit on hand-made inputs with known answers."""

from __future__ import annotations

import pytest
import torch

from prismatic_tr.reducers import num_kept
from prismatic_tr.vit.hquota import (
    farthest_first_select,
    hquota_merge,
    merge_into_nearest,
    received_attention,
)
from prismatic_tr.vit.merging import match_tokens, merge_schedule
from prismatic_tr.vit.topk import query_row_scores, topk_keep


def rows(*vectors: list[float]) -> torch.Tensor:
    return torch.tensor(vectors, dtype=torch.float64).unsqueeze(0)  # (1, N, C)


# --- ToMe -------------------------------------------------------------------------------------------
# tokens 0 (CLS) .. 5; set a = 0, 2, 4 and set b = 1, 3, 5. CLS looks exactly like token 1 (must not merge);
# token 2 is identical to 5 (best edge), token 4 is close to 1 (second edge).
METRIC = rows([1, 0], [1, 0], [0, 1], [1, 1], [1, 0.1], [0, 1])
X = torch.arange(6, dtype=torch.float64).repeat_interleave(2).view(1, 6, 2) * torch.tensor([1.0, 10.0], dtype=torch.float64)

TOME_CASES = [  # r, expected rows of the output as combinations of input rows
    (0, [[0], [1], [2], [3], [4], [5]]),
    (1, [[0], [4], [1], [3], [2, 5]]),
    (2, [[0], [1, 4], [3], [2, 5]]),
    (3, [[0], [1, 4], [3], [2, 5]]),  # clamped to (6 - 1) // 2 = 2
]


@pytest.mark.parametrize("r,groups", TOME_CASES)
def test_tome_matching_and_weighted_merge(r: int, groups: list[list[int]]) -> None:
    matching = match_tokens(METRIC, r, num_prefix=1)
    used = matching.num_merged
    assert used == min(r, 2)
    out, size = matching.merge_mean(X)
    expected = torch.stack([X[0, g].mean(dim=0) for g in groups]).unsqueeze(0)
    torch.testing.assert_close(out, expected)
    assert size[0, :, 0].tolist() == [float(len(g)) for g in groups]


def test_tome_second_merge_is_size_weighted() -> None:
    x, size = match_tokens(METRIC, 2, num_prefix=1).merge_mean(X)  # rows: 0 | 1+4 | 3 | 2+5
    matching2 = match_tokens(rows([1, 0], [1, 0], [0.1, 1], [0, 1]), 1, num_prefix=1)
    used = matching2.num_merged
    x2, size2 = matching2.merge_mean(x, size)  # token 3 (set a) joins 2+5 (set b)
    assert used == 1 and size2[0, :, 0].tolist() == [1.0, 2.0, 3.0]
    torch.testing.assert_close(x2[0, 2], X[0, [2, 3, 5]].mean(dim=0))


def test_tome_registers_protected_and_in_order() -> None:
    # P = 5 (CLS + 4 registers); token 6 looks like register 1 but must go to 5; 8 goes to 7
    metric = rows([1, 0], [1, 0], [1, 0], [1, 0], [1, 0], [1, 0.2], [1, 0], [0, 1], [0.1, 1])
    x = torch.randn(1, 9, 3, dtype=torch.float64)
    matching = match_tokens(metric, 5, num_prefix=5)
    used = matching.num_merged
    out, size = matching.merge_mean(x)
    assert used == 2
    assert torch.equal(out[:, :5], x[:, :5])
    torch.testing.assert_close(out[0, 5:], torch.stack([x[0, [5, 6]].mean(0), x[0, [7, 8]].mean(0)]))


@pytest.mark.parametrize("layers,r,expected", [
    (4, 3, [3, 3, 3, 3]),
    (3, [5], [5, 0, 0]),
    (4, (4, -1.0), [8, 5, 2, 0]),
    (5, (4, 1.0), [0, 2, 4, 6, 8]),
    (3, (6, 0.0), [6, 6, 6]),
])
def test_merge_schedule(layers: int, r: object, expected: list[int]) -> None:
    assert merge_schedule(r, layers) == expected


# --- TopK ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_prefix", [0, 1, 5])
def test_query_row_scores_match_full_attention(num_prefix: int) -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 12, 4, generator=g), torch.randn(2, 3, 12, 4, generator=g)
    scale = 0.5
    full = (q @ k.transpose(-2, -1) * scale).softmax(dim=-1)  # (B, H, N, N), built only to check
    if num_prefix:
        expected = full[:, :, 0, num_prefix:].mean(dim=1)
    else:
        expected = ((q.mean(dim=2, keepdim=True) @ k.transpose(-2, -1)) * scale).softmax(-1)[:, :, 0].mean(1)
    torch.testing.assert_close(query_row_scores(q, k, scale, num_prefix), expected)


def test_topk_keep_original_order() -> None:
    x = torch.arange(5.0).view(1, 5, 1).expand(2, 5, 3)
    scores = torch.tensor([[0.1, 0.9, 0.3, 0.8], [0.7, 0.1, 0.2, 0.6]])
    out, positions = topk_keep(x, scores, 2, num_prefix=1)
    assert positions.tolist() == [[0, 2, 4], [0, 1, 4]]  # the prefix, then patches 1, 3 / 0, 3 shifted by 1
    assert out[:, :, 0].tolist() == [[0.0, 2.0, 4.0], [0.0, 1.0, 4.0]]


@pytest.mark.parametrize("patches,rate,kept", [(196, 0.7, 138), (196, 0.1, 20), (90, 0.1, 9), (10, 1.0, 10), (5, 0.01, 1)])
def test_num_kept(patches: int, rate: float, kept: int) -> None:
    assert num_kept(patches, rate) == kept


# --- hquota_ff --------------------------------------------------------------------------------------------
POINTS = torch.tensor([0.0, 0.8, 2.0, 10.0, 11.0, 20.0], dtype=torch.float64)
DIST = (POINTS[:, None] - POINTS[None, :]).abs().unsqueeze(0)


def test_received_attention() -> None:
    probs = torch.tensor([[[[0.5, 0.5], [1.0, 0.0]], [[0.0, 1.0], [0.25, 0.75]]]])  # (1, H=2, 2, 2)
    assert received_attention(probs).tolist() == [[[1.5, 0.25], [0.5, 1.75]]]


@pytest.mark.parametrize("num_keep,num_hubs,expected", [
    (4, 1, [0, 2, 4, 5]),  # hub 2, then 20, then 11, then 0
    (2, 1, [2, 5]),
    (3, 2, [2, 3, 5]),  # hubs 2 and 3 (scores), then 20
    (6, 0, [0, 1, 2, 3, 4, 5]),
])
def test_farthest_first_select(num_keep: int, num_hubs: int, expected: list[int]) -> None:
    hub_score = torch.tensor([[0.1, 0.2, 0.9, 0.5, 0.3, 0.0]])
    assert farthest_first_select(DIST, hub_score, num_keep, num_hubs).tolist() == [expected]


def test_merge_into_nearest_size_weighted() -> None:
    x = torch.arange(6.0, dtype=torch.float64).view(1, 6, 1)
    size = torch.tensor([1.0, 2.0, 1.0, 3.0, 1.0, 1.0], dtype=torch.float64).view(1, 6, 1)
    out, new_size = merge_into_nearest(x, size, DIST, torch.tensor([[0, 2, 4, 5]]))
    assert new_size[0, :, 0].tolist() == [3.0, 1.0, 4.0, 1.0]
    torch.testing.assert_close(out[0, :, 0], torch.tensor([(0 + 2 * 1) / 3, 2.0, (3 * 3 + 4) / 4, 5.0], dtype=torch.float64))


@pytest.mark.parametrize("num_prefix", [0, 1, 5])
def test_hquota_merge_keeps_prefix_and_mass(num_prefix: int) -> None:
    g = torch.Generator().manual_seed(3)
    N, K = 20, 7
    x, size = torch.randn(2, N, 4, generator=g), torch.rand(2, N, 1, generator=g) + 0.5
    probs = torch.randn(2, 3, N, N, generator=g).softmax(dim=-1)
    out, new_size = hquota_merge(x, size, probs, K, num_prefix, hub_fraction=0.5)
    assert out.shape == (2, num_prefix + K, 4) and new_size.shape == (2, num_prefix + K, 1)
    assert torch.equal(out[:, :num_prefix], x[:, :num_prefix])
    torch.testing.assert_close(new_size.sum(dim=1), size.sum(dim=1))
    torch.testing.assert_close((out * new_size).sum(dim=1), (x * size).sum(dim=1))
