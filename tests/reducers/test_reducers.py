"""Property tests of every reduction strategy over shapes, ratios, dtypes, batch sizes and prefixes."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from prismatic_tr.bench.measure.ops import count_kernel_ops, find_capture_hazards
from prismatic_tr.reducers import ReducerConfig, TokenReducer, available_methods, num_kept, selection_methods
from prismatic_tr.reducers.random_stream import KeyStream
from prismatic_tr.reducers.strategies.diverse import max_min_order

GREEDY = ["diverse", "salient_diverse"]  # K steps of max-min selection
UNROLLED = [*GREEDY, "diverse_merge"]  # those K steps unroll when compiled
SELECTING = ["topk_magnitude", "attention_score", "random", "saliency", *GREEDY]
SCORED = SELECTING + ["diverse_merge"]  # merging into the top-scored representatives
GROUPED = ["pair_merge"]  # merging by groups of their own (no score)
METHODS = SCORED + GROUPED + ["spatial_pool"]
# (batch, patch tokens, channels, prefix tokens)
SHAPES = [(1, 256, 2176, 0), (2, 256, 1152, 0), (3, 196, 32, 1), (2, 64, 16, 5)]
RATIOS = [0.1, 0.25, 0.5, 0.75]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
COMPILE_BACKEND = "inductor"  # what torch.compile uses by default (C++ on the CPU: ~15 s for the four)


def make(method: str, ratio: float = 0.5, prefix: int = 0, **kw) -> TokenReducer:
    return TokenReducer(method=method, keep_ratio=ratio, num_prefix_tokens=prefix, **kw)


def features(b: int, n: int, d: int, p: int, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, p + n, d, generator=g).to(dtype)


def test_registry_lists_the_built_in_strategies():
    assert available_methods() == sorted(METHODS)
    assert selection_methods() == sorted(SCORED + GROUPED), \
        "every strategy but pooling keeps (or merges into) a subset, by a score or by groups of its own"


@pytest.mark.parametrize("method,shape,ratio", list(itertools.product(METHODS, SHAPES, RATIOS)))
def test_shape_prefix_and_rows(method, shape, ratio):
    b, n, d, p = shape
    x = features(b, n, d, p)
    reducer = make(method, ratio, p)
    res = reducer.reduce(x)
    expected_k = num_kept(n, ratio) if method != "spatial_pool" else (int(n**0.5) // 2) ** 2
    assert res.tokens.shape == (b, p + expected_k, d)
    assert reducer.output_tokens(p + n) == p + expected_k
    assert torch.equal(res.tokens[:, :p], x[:, :p]), "prefix tokens must pass through unchanged, first"
    assert res.indices.shape == (b, expected_k) and res.indices.dtype == torch.int64
    assert bool((res.indices[:, 1:] > res.indices[:, :-1]).all()), "kept tokens must stay in ascending order"
    if method in SELECTING:
        rows = torch.stack([x[i, p:][res.indices[i]] for i in range(b)])
        assert torch.equal(res.tokens[:, p:], rows), "selected tokens must be input rows"


@pytest.mark.parametrize("method,dtype", list(itertools.product(METHODS, DTYPES)))
def test_dtype_and_device_preserved(method, dtype):
    x = features(2, 256, 64, 0, dtype)
    out = make(method)(x)
    assert out.dtype == dtype and out.device == x.device


@pytest.mark.parametrize("method", METHODS)
def test_ratio_one_is_identity(method):
    x = features(2, 256, 32, 1)
    reducer = make(method, 1.0, 1, spatial_merge_size=1)
    out = reducer(x)
    assert out.shape == x.shape and torch.equal(out, x)


@pytest.mark.parametrize("method", ["topk_magnitude", "attention_score", "spatial_pool"])
def test_batch_rows_are_reduced_independently(method):
    x = features(4, 256, 48, 0)
    reducer = make(method, 0.25)
    full = reducer(x)
    for i in range(4):
        assert torch.equal(full[i : i + 1], reducer(x[i : i + 1]))


def test_random_is_reproducible_fresh_per_call_and_per_row():
    x = features(2, 256, 8, 0)
    a, b = make("random", seed=3), make("random", seed=3)
    first, second = a.reduce(x).indices, a.reduce(x).indices
    assert torch.equal(first, b.reduce(x).indices), "same seed, same first draw"
    assert not torch.equal(first, second), "a fresh draw per call"
    assert not torch.equal(first[0], first[1]), "each row draws its own subset"
    a.reseed()
    assert torch.equal(a.reduce(x).indices, first), "reseed restarts the sequence"


@pytest.mark.parametrize("method", METHODS)
def test_gradients_flow_to_kept_features(method):
    x = features(2, 64, 16, 1).requires_grad_(True)
    reducer = make(method, 0.5, 1)
    res = reducer.reduce(x)
    res.tokens.sum().backward()
    grad = x.grad
    assert torch.equal(grad[:, 0], torch.ones_like(grad[:, 0])), "prefix gets its gradient"
    if method in SELECTING:
        kept = torch.zeros(2, 64, dtype=torch.bool).scatter_(1, res.indices, True)
        assert bool((grad[:, 1:][kept] == 1).all()) and bool((grad[:, 1:][~kept] == 0).all())
    elif method in ("diverse_merge", *GROUPED):  # every token is in one output's mean: 1 / its group's size, K in all
        assert bool((grad[:, 1:] > 0).all())
        torch.testing.assert_close(grad[:, 1:, 0].sum(1), torch.full((2,), float(res.indices.shape[1])))
    else:
        assert torch.allclose(grad[:, 1:], torch.full_like(grad[:, 1:], 0.25))


def test_topk_magnitude_keeps_largest_norms():
    x = torch.zeros(1, 16, 4)
    big = torch.tensor([13, 2, 7, 9])
    x[0, big] = torch.arange(1.0, 5.0)[:, None] * 10
    x[0] += 0.01 * torch.randn(16, 4)
    res = make("topk_magnitude", 0.25).reduce(x)
    assert res.indices.tolist() == [sorted(big.tolist())]


def test_attention_score_keeps_tokens_aligned_with_the_mean():
    d = torch.zeros(8)
    d[0] = 1.0
    x = torch.randn(1, 20, 8) * 0.1
    aligned = [3, 11, 17]
    x[0, aligned] += 5 * d
    x[0, :, 0] += 0.5  # the mean leans towards d
    res = make("attention_score", 3 / 20).reduce(x)
    assert res.indices.tolist() == [aligned]


@pytest.mark.parametrize("grid,merge,pad", [((16, 16), 2, False), ((16, 16), 4, False), ((16, 16), 3, True),
                                            ((6, 10), 2, False), ((5, 7), 2, True)])
def test_spatial_pool_matches_window_means(grid, merge, pad):
    rows, cols = grid
    x = features(2, rows * cols, 6, 0)
    res = make("spatial_pool", spatial_merge_size=merge, grid_size=grid, pad=pad).reduce(x)
    g = x.reshape(2, rows, cols, 6)
    expected, starts = [], []
    for r in range(0, rows, merge):
        for c in range(0, cols, merge):
            expected.append(g[:, r : r + merge, c : c + merge].mean(dim=(1, 2)))
            starts.append(r * cols + c)
    torch.testing.assert_close(res.tokens, torch.stack(expected, 1))
    assert res.indices[0].tolist() == starts


def test_spatial_pool_is_avg_pool_on_256_patches():
    x = features(1, 256, 4, 0)
    out = make("spatial_pool", spatial_merge_size=2)(x)
    ref = F.avg_pool2d(x.reshape(1, 16, 16, 4).permute(0, 3, 1, 2), 2).flatten(2).transpose(1, 2)
    assert out.shape == (1, 64, 4)
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"method": "median"}, "unknown reduction method 'median'"),
        ({"keep_ratio": 0.0}, r"keep_ratio=0.0 .*\(0, 1\]"),
        ({"keep_ratio": 1.5}, r"keep_ratio=1.5"),
        ({"keep_ratio": -0.2}, r"keep_ratio=-0.2"),
        ({"keep_ratio": "half"}, r"keep_ratio='half'"),
        ({"spatial_merge_size": 0}, r"spatial_merge_size=0"),
        ({"num_prefix_tokens": -1}, r"num_prefix_tokens=-1"),
        ({"method": "spatial_pool", "spatial_merge_size": 3, "grid_size": (16, 16)}, r"does not divide the 16x16"),
        ({"grid_size": (0, 4)}, r"grid_size=\(0, 4\)"),
    ],
)
def test_bad_configuration_fails_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TokenReducer(ReducerConfig(**kwargs))


def test_bad_shapes_say_what_is_wrong():
    with pytest.raises(ValueError, match="not a square|cannot infer"):
        make("spatial_pool")(torch.randn(1, 250, 4))
    with pytest.raises(ValueError, match=r"\(B, N, D\)"):
        make("topk_magnitude")(torch.randn(256, 4))
    with pytest.raises(ValueError, match="no patch tokens"):
        make("topk_magnitude", prefix=4)(torch.randn(1, 4, 8))


# Kernel-launching ops with one prefix token: a selecting strategy's scores, then topk, sort, and one gather
# whose index holds the prefix too (arange, add, cat of small int tensors).
# The greedy ones: saliency (7) for the first pick, a normalisation, then per step an index, one write, one bmm and
# a few elementwise ops and an argmax (<= 9) for each of the K - 1 = 127 picks after the first.
OP_BUDGET = {"topk_magnitude": 1 + 6, "attention_score": 5 + 6, "spatial_pool": 9, "random": 12 + 6,
             "saliency": 8 + 6, "diverse": 17 + 9 * 127 + 6, "salient_diverse": 17 + 9 * 127 + 6,
             "diverse_merge": 17 + 9 * 127 + 6 + 16,  # diverse, then the merge: normalise, bmm, argmax, 2 scatter-adds
             # pair_merge: 3 rounds from 256 to 128 (each: the groups' means, one bmm, a top-k, the slots' remap),
             # then the groups' means and the prefix
             "pair_merge": 35 * 3 + 17}


@pytest.mark.parametrize("method", METHODS)
def test_no_host_syncs_and_few_ops(method):
    """No host sync and no tensor made from host data (what a CUDA-graph capture refuses:
    prismatic_tr.bench.measure.ops.find_capture_hazards) and few kernel-launching ops.
    ``random`` hashes its scores in ~12 elementwise integer ops (one fused kernel under torch.compile); advancing its
    key is arithmetic on a 0-d CPU tensor (host work, no device kernel), so it is not counted."""
    budget = OP_BUDGET[method]
    reducer = make(method, 0.5, 1)
    x = features(2, 256, 64, 1)
    assert find_capture_hazards(reducer, x) == {}
    ops = count_kernel_ops(reducer, x)
    if method == "random":
        ops = ops - count_kernel_ops(KeyStream(0).next_key)
    assert 0 < sum(ops.values()) <= budget, ops


@pytest.mark.parametrize("method", METHODS)
def test_compiles_fullgraph_and_matches_eager(method):
    """torch.compile(fullgraph=True) really compiles and runs every strategy (random included: its draws
    come from a counter-based hash, not a torch.Generator), with the same output as eager. The greedy ones
    unroll K steps: a smaller keep keeps their compile short."""
    from prismatic_tr.bench.measure.profiling import graph_breaks

    x = features(2, 64, 16, 1)
    ratio = 0.125 if method in UNROLLED else 0.5
    eager, compiled = make(method, ratio, 1), make(method, ratio, 1)
    assert graph_breaks(compiled, x, backend=COMPILE_BACKEND) == (0, [])  # compiles and runs once
    compiled.reseed()
    fn = torch.compile(compiled.reduce, fullgraph=True, backend=COMPILE_BACKEND)
    for _ in range(2):  # random: a fresh draw per call, the same one as eager's
        (out, idx, *_), (ref, ref_idx, *_) = fn(x), eager.reduce(x)
        assert torch.equal(idx, ref_idx)
        if method in SELECTING:
            assert torch.equal(out, ref), "selected rows are copied exactly"
        else:
            torch.testing.assert_close(out, ref)  # window means: the summation order may differ


def background_with_objects(seed: int = 0) -> tuple[torch.Tensor, list[int], list[int]]:
    """(1, 64, 8) tokens: a background direction plus noise on most patches; one large object (8 patches) and
    one small object (2 patches) in two other directions. Returns the tokens and the two objects' indices."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 64, 8, generator=g) * 0.05
    x[0, :, 0] += 1.0  # the table
    large, small = [3, 4, 11, 12, 19, 20, 27, 28], [50, 58]
    x[0, large, 1] += 1.5
    x[0, small, 2] += 0.6
    return x, large, small


def test_saliency_keeps_what_differs_from_the_mean_and_attention_score_the_opposite():
    x, large, small = background_with_objects()
    objects = sorted(large + small)
    assert make("saliency", 10 / 64).reduce(x).indices.tolist() == [objects]
    kept_by_attention = set(make("attention_score", 10 / 64).reduce(x).indices[0].tolist())
    assert not kept_by_attention & set(objects), "the mean token's nearest are background"


@pytest.mark.parametrize("method", GREEDY)
def test_max_min_selection_covers_every_cluster(method):
    """Three picks on three clusters: one token of each, the small object's included, where a top-3 of saliency
    spends all three on the large object (its tokens are the farthest from the mean)."""
    x, large, small = background_with_objects()
    kept = make(method, 3 / 64).reduce(x).indices[0].tolist()
    assert len(set(kept) & set(large)) == 1 and len(set(kept) & set(small)) == 1, kept
    assert set(make("saliency", 3 / 64).reduce(x).indices[0].tolist()) <= set(large)


def test_max_min_order_picks_each_token_once_in_order():
    x = features(3, 40, 6, 0)
    scores = max_min_order(x, 40)  # every token, each exactly once: scores are a permutation of 1..40
    assert torch.equal(scores.sort(dim=1).values, torch.arange(1.0, 41.0).expand(3, -1))
    partial = max_min_order(x, 7)
    assert torch.equal(partial, torch.where(scores > 33, scores - 33, -1.0)), "the first 7 picks, the rest -1"
    xn = F.normalize(x, dim=-1)
    order = scores.argsort(dim=1, descending=True)
    for step in range(1, 6):  # each pick is farthest (cosine) from its nearest earlier pick
        chosen = xn[0, order[0, :step]]
        gaps = (1 - xn[0] @ chosen.T).min(dim=1).values
        gaps[order[0, :step]] = -1
        assert int(gaps.argmax()) == int(order[0, step])


def test_random_draws_a_uniform_subset():
    """Each token is kept with probability K / N, each pair with K (K - 1) / (N (N - 1)), and two
    successive draws overlap as two independent ones would (hypergeometric mean K^2 / N)."""
    n, k, rows = 16, 4, 4000
    reducer = make("random", k / n, seed=11)
    x = torch.zeros(rows, n, 1)
    first, second = reducer.reduce(x).indices, reducer.reduce(x).indices
    kept = torch.zeros(rows, n).scatter_(1, first, 1.0)
    per_token = kept.sum(0)  # binomial(rows, 1/4): mean 1000, sd ~27
    assert bool(((per_token - rows * k / n).abs() < 5 * (rows * k / n * (1 - k / n)) ** 0.5).all()), per_token
    pairs = kept.T @ kept  # (n, n) co-occurrence counts
    expected_pair = rows * k * (k - 1) / (n * (n - 1))  # 200
    off_diag = pairs[~torch.eye(n, dtype=torch.bool)]
    assert bool(((off_diag - expected_pair).abs() < 5 * expected_pair**0.5).all()), off_diag
    again = torch.zeros(rows, n).scatter_(1, second, 1.0)
    overlap = (kept * again).sum(1).mean()
    assert abs(float(overlap) - k * k / n) < 0.05


def test_random_works_in_and_out_of_inference_mode():
    x = features(1, 16, 4, 0)
    with torch.inference_mode():
        built_inside = make("random", 0.5)
        first = built_inside(x)
    assert built_inside(x).shape == first.shape  # its key state is a normal tensor, usable outside too
    outside = make("random", 0.5)
    with torch.inference_mode():
        assert torch.equal(outside(x), first)  # same seed, same first draw


def test_random_seeds_differ_and_strategy_runs_alone():
    x = features(3, 64, 4, 0)
    a, b = make("random", 0.25, seed=0).reduce(x).indices, make("random", 0.25, seed=1).reduce(x).indices
    assert not torch.equal(a, b)
    from prismatic_tr.reducers import get_strategy

    direct = get_strategy("random").reduce(x, ReducerConfig(method="random", keep_ratio=0.25, seed=0), None)
    assert torch.equal(direct.indices, a), "no key: the first draw of cfg.seed"


def test_diverse_merge_keeps_diverses_cover_and_averages_each_group():
    """The kept patches are diverse's; each output token is the mean of the tokens nearest to it (cosine, a kept
    token always its own), so the groups partition the input and the weighted outputs sum to the input's sum; each
    output's size is its group's."""
    from prismatic_tr.reducers.strategies.diverse_merge import merge_into

    x = features(2, 64, 16, 0)
    got = make("diverse_merge", 0.25).reduce(x)
    want = make("diverse", 0.25).reduce(x)
    assert torch.equal(got.indices, want.indices) and got.positions is None and want.sizes is None
    assert torch.equal(got.sizes.sum(dim=1), torch.full((2,), 64.0))
    for b in range(2):
        idx = got.indices[b]
        unit = F.normalize(x[b], dim=-1)
        owner = (unit @ unit[idx].T).argmax(dim=-1)
        owner[idx] = torch.arange(len(idx))
        for j in range(len(idx)):
            torch.testing.assert_close(got.tokens[b, j], x[b][owner == j].mean(0))
            assert got.sizes[b, j] == (owner == j).sum()
    same = torch.cat([x[:, :1], x[:, :1], x[:, 2:]], dim=1)  # tokens 0 and 1 alike: a kept one stays its own
    merged, sizes = merge_into(same, torch.tensor([[0, 1, 5]]).expand(2, -1))
    torch.testing.assert_close(merged[:, 1], same[:, 1])
    assert (sizes >= 1).all()
