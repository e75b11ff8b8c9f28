"""``scripts/finetune_reduced.sh`` refuses, before any work, an output folder that already holds another run (and
bad arguments), instead of evaluating the first run it lists."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "finetune_reduced.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
COMMANDS = ("prismatic-tr-make-demos", "prismatic-tr-make-onpolicy-data", "prismatic-tr-finetune",
            "prismatic-tr-eval-policy", "prismatic-tr-choose-checkpoint", "prismatic-tr-adapters")


def _run(tmp_path: Path, out: Path, args: list[str], **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The script with a stand-in PYTHON, and stand-in console scripts beside it (the commands the script runs), that
    only leave a mark, so any work it starts shows."""
    mark = tmp_path / "worked"
    python = tmp_path / "python"
    for name in ("python", *COMMANDS):
        stand_in = tmp_path / name
        stand_in.write_text(f"#!/usr/bin/env bash\necho \"$(basename \"$0\") $@\" >> {mark}\n")
        stand_in.chmod(0o755)
    full_env = {**os.environ, "PYTHON": str(python), "OUT_DIR": str(out), "DATA": str(tmp_path / "data"), **env}
    proc = subprocess.run(["bash", str(SCRIPT), *args], env=full_env, capture_output=True, text=True, timeout=60)
    return proc, mark


CASES = [  # (what the folder holds, environment, message)
    ("runs/earlier_run", {}, "already holds a run (.*runs/earlier_run)"),
    ("eval_val_step_000400", {}, "already holds results of another run (.*eval_val_step_000400)"),
    ("adapter", {}, "already holds results of another run (.*adapter)"),
    ("runs/a runs/b", {"SKIP_TRAINING": "1"}, "evaluates the one run in .*runs, and it holds 2"),
    ("", {"SKIP_TRAINING": "1"}, "evaluates the one run in .*runs, and it holds 0 \\(none\\)"),
]


@pytest.mark.parametrize("held, env, message", CASES)
def test_output_folder_with_another_run_is_refused_before_any_work(tmp_path, held, env, message) -> None:
    import re

    out = tmp_path / "out"
    out.mkdir()
    for sub in held.split():
        (out / sub).mkdir(parents=True)
    proc, mark = _run(tmp_path, out, ["vision:diverse:0.1@0.25", "4", "2"], **env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("finetune_reduced.sh: error: ") and str(out) in lines[0]
    assert re.search(message, lines[0]), lines[0]
    assert not mark.exists() and not (tmp_path / "data").exists()  # nothing ran


@pytest.mark.parametrize("args, message", [
    (["llm:attention:0.1@0.25", "4", "2"], "site llm is not allowed; use projector or vision"),
    (["vision", "diverse", "0.1", "0.25", "4", "2"], "setting vision is not one site's [site:]method:keep[@depth]"),
    (["vision:diverse:0.1@0.25+llm:attention:0.5@0.25", "4", "2"], "is not one site's"),
    (["vision:diverse:0.1@0.25", "many", "2"], "STEPS=many is not allowed"),
    (["vision:diverse:0.1@0.25", "4", "2", "POLICY=pi0"], "POLICY=pi0 is not allowed; use openvla or oft"),
    (["vision:diverse:0.1@0.25", "4", "2", "TEST_EPISODES=all"], "TEST_EPISODES=all is not allowed"),
])
def test_bad_arguments_are_refused_before_any_work(tmp_path, args, message) -> None:
    env = dict(a.split("=", 1) for a in args if "=" in a)
    proc, mark = _run(tmp_path, tmp_path / "out", [a for a in args if "=" not in a], **env)
    assert proc.returncode == 2 and message in proc.stderr and not mark.exists()


def test_an_empty_folder_goes_ahead(tmp_path) -> None:
    """The check lets a fresh folder through: the first thing run is the demonstrations (the stand-in python)."""
    proc, mark = _run(tmp_path, tmp_path / "out", ["vision:diverse:0.1@0.25", "4", "2"])
    assert mark.exists() and mark.read_text().splitlines()[0].startswith("prismatic-tr-make-demos ")
