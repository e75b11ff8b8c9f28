"""Tests of the shared bench core: timing summaries and ordering, MAC counting, op counting, host syncs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from prismatic_tr.bench.flops import count_macs, count_macs_by_module, count_macs_by_op, empty_weights
from prismatic_tr.bench.ops import (
    count_dispatched_ops,
    count_kernel_ops,
    find_host_syncs,
    kernel_ops,
    ops_added,
)
from prismatic_tr.bench.timing import Timer, interleaved, summarize, time_fn

# ---------------------------------------------------------------- timing


@pytest.mark.parametrize("samples", [[3.0], [5.0, 1.0], list(range(1, 11)), [0.5, 9.0, 2.0, 2.0, 7.5, 1.0, 4.0]])
def test_summarize_matches_numpy(samples: list[float]) -> None:
    s = summarize(samples)
    arr = np.asarray(samples, dtype=float)
    assert s["n"] == len(samples)
    assert s["median"] == pytest.approx(np.median(arr))
    assert s["p10"] == pytest.approx(np.percentile(arr, 10))
    assert s["p90"] == pytest.approx(np.percentile(arr, 90))
    assert s["mean"] == pytest.approx(arr.mean())


def test_time_fn_calls_and_samples() -> None:
    calls: list[int] = []
    stats = time_fn(lambda: calls.append(1), warmup=3, repeats=7, device="cpu")
    assert len(calls) == 10
    assert stats.n == 7 and all(t >= 0 for t in stats.samples_ms)
    assert stats.total_s * 1e3 >= sum(stats.samples_ms) * 0.99
    assert set(stats.as_dict()) == {"median", "p10", "p90", "mean", "n", "total_s"}


def test_interleaved_runs_round_robin() -> None:
    order: list[str] = []
    out = interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, warmup=1, repeats=3)
    assert order == ["a", "b"] * 4
    assert set(out) == {"a", "b"} and out["a"].n == 3 and out["b"].n == 3


def test_timer_phases() -> None:
    timer = Timer("cpu")
    for _ in range(4):
        timer.start()
        timer.mark("vision")
        with timer.phase("llm"):
            sum(range(1000))
        timer.stop()
    res = timer.results()
    assert list(res) == ["vision", "llm", "total"]
    assert all(len(v) == 4 for v in res.values())
    for v, llm, tot in zip(res["vision"], res["llm"], res["total"], strict=True):
        assert tot == pytest.approx(v + llm)
    assert timer.summary()["llm"]["n"] == 4


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: time_fn(lambda: None, warmup=-1, repeats=2), "warmup"),
        (lambda: time_fn(lambda: None, warmup=0, repeats=0), "repeats"),
        (lambda: interleaved({}, 1, 1), "at least one"),
        (lambda: summarize([]), "at least one"),
        (lambda: Timer("cpu").mark("x"), "before start"),
        (lambda: time_fn(lambda: None, 0, 1, device="nodevice"), "nodevice"),
    ],
)
def test_timing_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- flops


@pytest.mark.parametrize(("b", "n", "din", "dout"), [(1, 5, 8, 16), (3, 7, 32, 4)])
def test_linear_macs(b: int, n: int, din: int, dout: int) -> None:
    layer = torch.nn.Linear(din, dout)
    assert count_macs(layer, torch.randn(b, n, din)) == b * n * din * dout
    assert count_macs_by_op(layer, torch.randn(b, n, din)) == {"aten.addmm": b * n * din * dout}


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("b", "h", "lq", "lk", "d"), [(1, 2, 5, 5, 8), (2, 3, 4, 9, 16)])
def test_sdpa_macs_counted(device: str, b: int, h: int, lq: int, lk: int, d: int) -> None:
    q = torch.randn(b, h, lq, d, device=device)
    kv = torch.randn(b, h, lk, d, device=device)
    assert count_macs(F.scaled_dot_product_attention, q, kv, kv) == 2 * b * h * lq * lk * d


def test_macs_by_module_has_children() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    by_mod = count_macs_by_module(model, torch.randn(3, 4))
    assert by_mod["Global"] == 3 * (4 * 8 + 8 * 2)
    assert by_mod["Sequential.0"] == 3 * 4 * 8 and by_mod["Sequential.2"] == 3 * 8 * 2


# The study's convention (GMACs per image): DeiT-B/16, TopK keep 0.1 at blocks 3/6/9.
REFERENCE_GMACS = [
    ("deit_base_patch16_224", 224, {}, 17.57),
    ("deit_base_patch16_224", 448, {}, 78.52),
    ("topk_deit_base_patch16_224", 224, {"keep_rate": 0.1, "reduction_loc": [3, 6, 9]}, 5.55),
    ("topk_deit_base_patch16_224", 448, {"keep_rate": 0.1, "reduction_loc": [3, 6, 9]}, 24.73),
]


@pytest.mark.parametrize(("name", "px", "kwargs", "gmacs"), REFERENCE_GMACS)
def test_reference_gmacs_within_half_percent(name: str, px: int, kwargs: dict, gmacs: float) -> None:
    from prismatic_tr.vit import create_model

    with empty_weights():
        model = create_model(name, pretrained=False, img_size=px, **kwargs).eval()
    macs = count_macs(model, torch.empty(2, 3, px, px, device="meta")) / 2 / 1e9
    assert abs(macs / gmacs - 1.0) < 0.005


def test_empty_weights_is_undone() -> None:
    with empty_weights():
        meta = torch.nn.Linear(3, 3)
    real = torch.nn.Linear(3, 3)
    assert meta.weight.device.type == "meta" and real.weight.device.type == "cpu"


# ---------------------------------------------------------------- ops


def _mixed(x: torch.Tensor) -> torch.Tensor:
    y = x.view(-1).reshape(x.shape).transpose(0, 1)  # views only
    return (y + 1).mm(x) * 2


def test_count_ops_and_views() -> None:
    x = torch.randn(4, 4)
    ops = count_dispatched_ops(_mixed, x)
    assert ops["aten.add"] == 1 and ops["aten.mm"] == 1 and ops["aten.mul"] == 1
    assert ops["aten.view"] >= 1 and ops["aten.transpose"] == 1
    launching = count_kernel_ops(_mixed, x)
    assert launching == {"aten.add": 1, "aten.mm": 1, "aten.mul": 1}
    assert kernel_ops(ops) == launching


def _sync_item(x: torch.Tensor) -> float:
    return x.sum().item()


def _sync_mask(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0]


def _sync_nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x)


def _sync_branch(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if (x.sum() > 0) else x


def _sync_masked_select(x: torch.Tensor) -> torch.Tensor:
    return torch.masked_select(x, x > 0)


def _sync_unique(x: torch.Tensor) -> torch.Tensor:
    return torch.unique(x)


def _clean(x: torch.Tensor) -> torch.Tensor:
    idx = x.sum(-1).topk(2).indices
    return x.gather(0, idx.unsqueeze(-1).expand(-1, x.shape[-1])).softmax(-1)


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_sync_item, "aten._local_scalar_dense"),
        (_sync_mask, "aten.index(bool mask)"),
        (_sync_nonzero, "aten.nonzero"),
        (_sync_branch, None),  # is_nonzero or _local_scalar_dense depending on torch
        (_sync_masked_select, "aten.masked_select"),
        (_sync_unique, None),  # aten._unique2 or aten.unique_dim, depending on torch
        (_clean, "none"),
    ],
)
def test_find_host_syncs(fn, expected: str | None) -> None:
    syncs = find_host_syncs(fn, torch.randn(5, 3))
    if expected == "none":
        assert syncs == {}
    elif expected is None:
        assert sum(syncs.values()) >= 1
    else:
        assert syncs[expected] >= 1


def test_ops_added() -> None:
    from collections import Counter

    assert ops_added(Counter(a=2, b=1), Counter(a=3, b=1, c=2)) == Counter(a=1, c=2)
