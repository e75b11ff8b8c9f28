"""Token Merging (``prismatic_tr.vit.merging``) against a deliberately plain reference, exactly.

The reference below follows the algorithm as the paper states it, one image and one token at a time, with
Python lists and loops: split the non-prefix positions into A (even) and B (odd), give every A token its most
similar B token (cosine, in float64), merge the r strongest edges, average each group weighted by size. It
builds the documented layout directly ([prefix | A tokens not merged | B tokens]), so the fast version must
match it bit for bit (max abs difference 0.0), tokens and sizes, on random inputs.
"""

from __future__ import annotations

import math

import pytest
import torch

from prismatic_tr.vit.merging import match_tokens, merge_schedule, proportional_attention_bias


# --- the reference --------------------------------------------------------------------------------------------
def cosine(u: list[float], v: list[float]) -> float:
    dot = sum(a * b for a, b in zip(u, v, strict=True))
    return dot / (math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v)))


def reference_groups(metric: list[list[float]], r: int, num_prefix: int) -> list[list[int]]:
    """One image's metric (N rows) -> the output tokens in order, each as the input positions it merges
    (the token that stays first, then its sources in ascending position)."""
    n = len(metric)
    set_a = [p for p in range(num_prefix, n) if p % 2 == 0]
    set_b = [p for p in range(num_prefix, n) if p % 2 == 1]
    r = max(0, min(r, (n - num_prefix) // 2))
    if r == 0:
        return [[p] for p in range(n)]
    edges = []  # (similarity, a, best b)
    for a in set_a:
        best_sim, best_b = -math.inf, -1
        for b in set_b:
            sim = cosine(metric[a], metric[b])
            if sim > best_sim:  # strict: the first of equally similar B tokens wins
                best_sim, best_b = sim, b
        edges.append((best_sim, a, best_b))
    edges.sort(key=lambda edge: (-edge[0], edge[1]))  # strongest first; equal strength: lower A position first
    partner = {a: b for _, a, b in edges[:r]}
    groups = [[p] for p in range(num_prefix)]
    groups += [[a] for a in set_a if a not in partner]
    groups += [[b] + [a for a in sorted(partner) if partner[a] == b] for b in set_b]
    return groups


def reference_mean(x: torch.Tensor, size: torch.Tensor, groups: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """One image: x (N, C), size (N, 1) -> size-weighted group means (len(groups), C) and group sizes."""
    acc = torch.promote_types(x.dtype, size.dtype)
    rows, sizes = [], []
    for group in groups:
        if len(group) == 1:  # a token that absorbed nothing is copied
            rows.append(x[group[0]])
            sizes.append(size[group[0]])
            continue
        mass, total = x[group[0]].to(acc) * size[group[0]], size[group[0]]
        for p in group[1:]:
            mass, total = mass + x[p].to(acc) * size[p], total + size[p]
        rows.append((mass / total).to(x.dtype))
        sizes.append(total)
    return torch.stack(rows), torch.stack(sizes)


def reference_sum(y: torch.Tensor, groups: list[list[int]]) -> torch.Tensor:
    """One image: y (N, C) -> group sums (len(groups), C), added in group order in at least float32."""
    acc = torch.promote_types(y.dtype, torch.float32)
    rows = []
    for group in groups:
        total = y[group[0]].to(acc)
        for p in group[1:]:
            total = total + y[p].to(acc)
        rows.append(total.to(y.dtype))
    return torch.stack(rows)


# --- fast == reference ----------------------------------------------------------------------------------------
def check_against_reference(metric: torch.Tensor, x: torch.Tensor, size: torch.Tensor | None, r: int,
                            num_prefix: int) -> None:
    matching = match_tokens(metric, r, num_prefix)
    out, out_size = matching.merge_mean(x, size)
    summed = matching.merge_sum(x)
    unit = torch.ones(x.shape[0], x.shape[1], 1, dtype=torch.float32)
    for b in range(x.shape[0]):
        groups = reference_groups(metric[b].double().tolist(), r, num_prefix)
        assert matching.num_merged == x.shape[1] - len(groups)
        ref, ref_size = reference_mean(x[b], unit[b] if size is None else size[b], groups)
        assert out[b].dtype == x.dtype and out_size[b].dtype == ref_size.dtype
        assert (out[b].float() - ref.float()).abs().max().item() == 0.0
        assert (out_size[b] - ref_size).abs().max().item() == 0.0
        assert (summed[b].float() - reference_sum(x[b], groups).float()).abs().max().item() == 0.0


def r_value(case: str, num_tokens: int, num_prefix: int) -> int:
    most = (num_tokens - num_prefix) // 2
    return {"zero": 0, "one": 1, "max": most, "over_max": most + 3}[case]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("num_prefix", [0, 1, 2, 5])
@pytest.mark.parametrize("r_case", ["zero", "one", "max", "over_max"])
@pytest.mark.parametrize("num_tokens", [7, 12, 25])
def test_matches_loop_reference_exactly(num_tokens: int, r_case: str, num_prefix: int, batch: int,
                                        dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1000 * num_tokens + 10 * num_prefix + batch)
    metric = torch.randn(batch, num_tokens, 8, generator=g).to(dtype)
    x = torch.randn(batch, num_tokens, 5, generator=g).to(dtype)
    sizes = torch.randint(1, 6, (batch, num_tokens, 1), generator=g).float()  # as after earlier merges
    r = r_value(r_case, num_tokens, num_prefix)
    check_against_reference(metric, x, None, r, num_prefix)
    check_against_reference(metric, x, sizes, r, num_prefix)


@pytest.mark.parametrize("num_prefix", [0, 1, 5])
@pytest.mark.parametrize("seed", range(4))
def test_ties_broken_as_documented(num_prefix: int, seed: int) -> None:
    """Metrics drawn from 3 one-hot directions: every similarity is exactly 0 or 1, so ties are everywhere."""
    g = torch.Generator().manual_seed(seed)
    num_tokens = 20
    metric = torch.eye(3)[torch.randint(0, 3, (2, num_tokens), generator=g)]
    x = torch.randn(2, num_tokens, 4, generator=g)
    for r in (1, 3, (num_tokens - num_prefix) // 2):
        check_against_reference(metric, x, None, r, num_prefix)


def test_matching_is_reusable_and_shapes_static() -> None:
    g = torch.Generator().manual_seed(7)
    metric, x = torch.randn(2, 11, 4, generator=g), torch.randn(2, 11, 6, generator=g)
    matching = match_tokens(metric, 4, num_prefix=1)
    assert matching.num_merged == 4 and matching.merge_sum(x).shape == (2, 7, 6)
    mean, size = matching.merge_mean(x)
    assert mean.shape == (2, 7, 6) and size.shape == (2, 7, 1) and size.dtype == torch.float32
    torch.testing.assert_close(size.sum(dim=1), torch.full((2, 1), 11.0))
    torch.testing.assert_close((mean * size).sum(dim=1), x.sum(dim=1))  # mass is conserved
    with pytest.raises(ValueError, match="10 tokens"):
        matching.merge_sum(x[:, :10])
    with pytest.raises(ValueError, match="num_prefix"):
        match_tokens(metric, 1, num_prefix=12)


def test_proportional_attention_bias() -> None:
    size = torch.tensor([[[1.0], [2.0], [4.0]]])
    bias = proportional_attention_bias(size)
    assert bias.shape == (1, 1, 1, 3)
    torch.testing.assert_close(bias[0, 0, 0], torch.tensor([0.0, math.log(2.0), math.log(4.0)]))
    logits = torch.zeros(1, 1, 1, 3) + bias  # equal logits: a token of size s gets s times the weight
    torch.testing.assert_close(logits.softmax(-1)[0, 0, 0], torch.tensor([1 / 7, 2 / 7, 4 / 7]))


@pytest.mark.parametrize("r", [0, 3, 8, 13])
@pytest.mark.parametrize("inflection", [-1.0, -0.5, -0.3, 0.0, 0.25, 0.7, 1.0])
@pytest.mark.parametrize("depth", [1, 4, 12])
def test_merge_schedule_is_linear_around_r(r: int, inflection: float, depth: int) -> None:
    schedule = merge_schedule((r, inflection), depth)
    assert len(schedule) == depth and min(schedule) >= 0
    assert depth * r - depth < sum(schedule) <= depth * r  # each block rounds down by less than one
    steps = [b - a for a, b in zip(schedule[:-1], schedule[1:], strict=True)]
    assert all(s * inflection >= 0 for s in steps)  # falls for inflection < 0, rises for > 0, flat at 0
    if depth > 1:
        assert schedule[0] == int(r * (1 - inflection) + 1e-6) and schedule[-1] == int(r * (1 + inflection) + 1e-6)


def test_merge_schedule_lists_and_errors() -> None:
    assert merge_schedule([2, 1], 4) == [2, 1, 0, 0]
    assert merge_schedule(5, 2) == [5, 5]
    with pytest.raises(ValueError, match="3 entries for a model of depth 2"):
        merge_schedule([1, 2, 3], 2)
