"""examples/token_reduction_example.py runs the bundled policy unreduced, training-free reduced and adapted, and
refuses a bad --episodes with status 2."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "token_reduction_example.py"
# label  tokens  [7 action values]  successes/episodes
ROW = re.compile(r"^(?P<label>\S.*?)\s+(?P<tokens>\d+)\s+\[(?P<action>[^\]]+)\]\s+(?P<k>\d+)/(?P<n>\d+)$", re.M)


@pytest.mark.slow
def test_example_runs_the_three_settings_on_the_bundled_policy():
    from prismatic_tr.reducers import num_kept

    done = subprocess.run([sys.executable, str(EXAMPLE), "--episodes", "2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    rows = {m["label"]: m for m in ROW.finditer(done.stdout)}
    assert list(rows) == ["unreduced", "vision diverse_merge keep 0.1 after 1/4, training-free",
                          "same + shipped adapter vision-diverse_merge-0.1-0.25"], done.stdout
    unreduced, free, adapted = rows.values()
    # both towers cut the 224 px image into the same 16 x 16 patches, fused patch by patch: 256 tokens
    assert int(unreduced["tokens"]) == 256
    assert int(free["tokens"]) == int(adapted["tokens"]) == num_kept(256, 0.1) == 26
    for row in rows.values():
        assert len(row["action"].split()) == 7
        assert int(row["n"]) == 2 and 0 <= int(row["k"]) <= 2
    assert "2 episodes of the test split (seeds 3,000,000-3,000,001)" in done.stdout
    assert "python vla_scripts/benchmark.py" in done.stdout  # speed is the main job's, never timed here
    assert not re.search(r"\d\s*ms\b|speedup", done.stdout)


@pytest.mark.parametrize("value", ["0", "-3", "two", "2000000"])
def test_example_refuses_bad_episodes(value: str, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--episodes", value])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert exit_.value.code == 2
    assert "--episodes" in capsys.readouterr().err
