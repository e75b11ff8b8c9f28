"""examples/token_reduction_example.py runs on the tiny model and times warm, interleaved calls."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "token_reduction_example.py"


def test_example_times_warm_interleaved_medians(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    from prismatic_tr.bench.measure import timing

    calls: list[dict] = []
    real = timing.interleaved
    monkeypatch.setattr(timing, "interleaved", lambda fns, **kw: calls.append({"names": list(fns), **kw}) or real(fns, **kw))
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--warmup", "1", "--runs", "1"])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert len(calls) == 1 and calls[0]["warmup"] == 1 and calls[0]["repeats"] == 1  # never the cold call
    assert calls[0]["names"][0] == "no reduction" and len(calls[0]["names"]) == 5
    assert set(calls[0]["contexts"]) == set(calls[0]["names"])  # reductions attached outside the timed calls
    assert "median of 1 warm calls" in out and "speedup" in out
    assert "restored exactly after apply / replace / remove: True" in out
