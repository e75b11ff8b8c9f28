"""What every results file records beside a timing (``prismatic_tr.bench.measure.devices.timing_meta``): the command,
the dtype, and the machine (CPU model and its avx2 / avx512f / avx512_bf16 / amx_bf16 flags, cores, threads)."""

from __future__ import annotations

import pytest
import torch

from prismatic_tr.bench.measure.devices import CPU_FEATURES, cpu_feature_words, machine_info, timing_meta

CPUINFO = "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse avx2 avx512f amx_bf16\n"


def test_timing_meta_names_command_dtype_and_machine():
    meta = timing_meta("python x.py --dtype bfloat16", torch.bfloat16)
    assert meta["command"] == "python x.py --dtype bfloat16" and meta["dtype"] == "bfloat16"
    machine = meta["machine"]
    assert set(machine) == {"cpu", "cores", "torch_threads", "torch", "platform", "gpu"}
    assert set(machine["cpu"]["features"]) == set(CPU_FEATURES) and machine["cpu"]["model"]
    assert machine["gpu"] is None and machine_info("cpu")["gpu"] is None
    assert timing_meta("c", "float32")["dtype"] == "float32"
    with pytest.raises(ValueError, match="float64"):
        timing_meta("c", torch.float64)


@pytest.mark.parametrize("cpuinfo,words", [
    (CPUINFO, "avx2, avx512f, amx_bf16"),
    ("model name\t: Old\nflags\t\t: fpu sse\n", "none of avx2, avx512f, avx512_bf16, amx_bf16"),
    ("", "features unknown"),
])
def test_cpu_feature_words(cpuinfo, words):
    assert cpu_feature_words(cpuinfo) == words


def test_a_load_test_report_records_the_machine():
    from prismatic_tr.serve.loadtest import LoadTestConfig, Tally, summarize

    server = {"machine": machine_info()}
    report = summarize(LoadTestConfig(), Tally(), 1.0, [], {}, server)
    assert report["machine"] == server["machine"]
    assert set(summarize(LoadTestConfig(), Tally(), 1.0, [], {}, {})["machine"]["cpu"]["features"]) == set(CPU_FEATURES)
