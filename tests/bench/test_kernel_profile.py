"""The kernel profile's bookkeeping (prismatic_tr.bench.vla.kernel_profile), without a GPU: kernels sorted into
kinds by name, the phase ranges kept apart from the kernels, and the recount of a file written before they were."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from prismatic_tr.bench.vla.kernel_profile import PHASE_PREFIX, kernel_kind, recount, summarize_events


@dataclass
class Event:
    """What summarize_events reads of a profiler average: name, device, device times (us), launches."""

    key: str
    device_type: str
    self_device_time_total: float
    device_time_total: float
    count: int


@pytest.mark.parametrize("name, kind", [
    ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", "gemm"), ("cudnn_generated_fort_native_sdpa_sm90_flash", "attention"),
    ("void at::native::elementwise_kernel<128, 4>", "elementwise"), ("void at::native::reduce_kernel<512, 1>", "reduce"),
    ("void at::native::index_elementwise_kernel", "index"), ("mystery_kernel", "other")])
def test_kernels_are_sorted_into_kinds_by_name(name: str, kind: str) -> None:
    assert kernel_kind(name) == kind


def test_phase_ranges_are_spans_not_kernels() -> None:
    events = [Event("nvjet_gemm", "DeviceType.CUDA", 6000.0, 6000.0, 6),
              Event("void at::native::elementwise_kernel", "DeviceType.CUDA", 3000.0, 3000.0, 30),
              Event(PHASE_PREFIX + "llm", "DeviceType.CUDA", 12000.0, 12000.0, 3),
              Event(PHASE_PREFIX + "llm", "DeviceType.CPU", 0.0, 9000.0, 3),
              Event("aten::mm", "DeviceType.CPU", 0.0, 6000.0, 6)]
    out = summarize_events(events, steps=3, top=5)
    assert out["kernel_ms"] == pytest.approx(3.0) and out["kernels"] == 12
    assert out["by_kind_ms"] == {"gemm": pytest.approx(2.0), "elementwise": pytest.approx(1.0)}
    assert out["phase_span_ms"] == {"llm": pytest.approx(4.0)} and [t["name"] for t in out["top"]][0] == "nvjet_gemm"


def test_recount_takes_the_phase_ranges_out() -> None:
    old = {"setting": "none", "kernel_ms": 10.0, "kernels": 12.0,
           "by_kind_ms": {"other": 6.5, "gemm": 2.0, "reduce": 1.5}, "by_phase_ms": {"llm": 6.0, "reducer": 1.0},
           "top": [{"name": PHASE_PREFIX + "llm", "ms": 6.0}, {"name": "nvjet", "ms": 2.0}]}
    new = recount(old)
    assert new["kernel_ms"] == pytest.approx(3.0) and new["kernels"] == 10.0
    assert new["by_kind_ms"] == {"gemm": 2.0, "other": 0.5, "reduce": 0.5}  # phase:reducer counted as "reduce"
    assert new["phase_span_ms"] == {"llm": 6.0, "reducer": 1.0} and [t["name"] for t in new["top"]] == ["nvjet"]
    with pytest.raises(ValueError, match="already"):
        recount(new)
