"""The checkpoint choice (``prismatic_tr.policy.checkpoint_choice``): one rule, most validation successes, ties to the
later step, for the recipes and for ``scripts/finetune_reduced.sh`` (``prismatic-tr-choose-checkpoint``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from prismatic_tr.policy.checkpoint_choice import (
    best_step,
    checkpoints_in,
    choose_checkpoint,
    choose_from_results,
    main,
    step_of,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("successes, best", [
    ({400: 3, 800: 5, 1200: 4}, 800),
    ({400: 5, 800: 5, 1200: 4}, 800),  # a tie: the later step
    ({400: 2, 800: 2, 1200: 2}, 1200),
    ({1200: 1, 400: 1}, 1200),  # not by insertion order
])
def test_best_step_ties_to_the_later_step(successes: dict[int, int], best: int) -> None:
    assert best_step(successes) == best


def _checkpoints(tmp_path: Path, steps: list[int]) -> dict[int, Path]:
    out = {}
    for step in steps:
        path = tmp_path / "checkpoints" / f"step_{step:06d}"
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        out[step] = path
    return out


def test_choose_checkpoint_scores_each_and_records_the_rule(tmp_path: Path) -> None:
    checkpoints = _checkpoints(tmp_path, [2, 4, 6])
    scores = {2: 1, 4: 3, 6: 3}
    chosen, record = choose_checkpoint(checkpoints, 5, lambda c: {"successes": scores[step_of(c)]})
    assert chosen == checkpoints[6] and record["chosen"] == str(checkpoints[6])
    assert record["episodes"] == 5 and record["split"] == "validation" and "later step" in record["rule"]
    assert [c["step"] for c in record["candidates"]] == [2, 4, 6]


def _per_task(tasks: dict[int, list[int]]):
    return lambda c: {"successes": sum(tasks[step_of(c)]), "per_task": dict(enumerate(tasks[step_of(c)]))}


def test_a_per_task_floor_chooses_among_the_checkpoints_that_reach_it_on_every_task(tmp_path: Path) -> None:
    """MetaWorld's stage 2: step 1000 had 93 of 100 with one task at 4 of 10, step 1500 91 with every task >= 8."""
    checkpoints = _checkpoints(tmp_path, [500, 1000, 1500])
    tasks = {500: [5, 9, 4], 1000: [10, 10, 4], 1500: [8, 8, 7]}
    assert choose_checkpoint(checkpoints, 10, _per_task(tasks))[0] == checkpoints[1000]   # no floor: the most
    chosen, record = choose_checkpoint(checkpoints, 10, _per_task(tasks), floor=7)
    assert chosen == checkpoints[1500] and record["reach_floor"] == [1500] and record["task_floor"] == 7
    assert record["rule"].startswith("among the checkpoints with >= 7 of 10 validation successes on every task")
    # none reaches it: the most successes over all of them, as without a floor
    chosen, record = choose_checkpoint(checkpoints, 10, _per_task(tasks), floor=9)
    assert chosen == checkpoints[1000] and record["reach_floor"] == []


@pytest.mark.parametrize("floor, match", [(-1, "floor -1"), (11, "floor 11 is not allowed; use 0 \\(none\\) to 10")])
def test_a_floor_outside_the_episodes_is_refused(tmp_path: Path, floor: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        choose_checkpoint(_checkpoints(tmp_path, [2, 4]), 10, lambda c: pytest.fail("scored"), floor=floor)


def test_a_floor_needs_per_task_scores(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="per_task"):
        choose_checkpoint(_checkpoints(tmp_path, [2, 4]), 10, lambda c: {"successes": 3}, floor=2)


@pytest.mark.parametrize("episodes, steps", [(0, [2, 4]), (5, [4])])
def test_no_episodes_or_one_checkpoint_keeps_the_last_unscored(tmp_path: Path, episodes: int, steps: list[int]) -> None:
    checkpoints = _checkpoints(tmp_path, steps)
    chosen, record = choose_checkpoint(checkpoints, episodes, lambda c: pytest.fail("scored"), "episodes_per_task")
    assert chosen == checkpoints[steps[-1]] and record["episodes_per_task"] == 0
    assert record["rule"] == "the last step's checkpoint"


def test_checkpoints_in_skips_what_is_not_a_checkpoint(tmp_path: Path) -> None:
    checkpoints = _checkpoints(tmp_path, [4, 2])
    (tmp_path / "checkpoints" / "step_000008").mkdir()  # no config.json: not saved yet
    (tmp_path / "checkpoints" / "latest").mkdir()
    assert checkpoints_in(tmp_path / "checkpoints") == {2: checkpoints[2], 4: checkpoints[4]}
    with pytest.raises(ValueError, match="not a step_N"):
        step_of(tmp_path / "latest")


def _results(out: Path, name: str, successes: int, episodes: int = 10) -> None:
    folder = out / f"eval_val_{name}"
    folder.mkdir(parents=True)
    records = [{"setting": "none", "successes": 10, "success_rate": 1.0},
               {"setting": "vision:diverse:0.1@0.25", "successes": successes, "success_rate": successes / episodes}]
    (folder / "results.json").write_text(json.dumps({"records": records}))


def test_the_script_choice_reads_eval_policy_results_and_ties_to_the_later_step(tmp_path: Path, capsys) -> None:
    run, out = tmp_path / "run", tmp_path / "out"
    checkpoints = _checkpoints(run, [400, 800, 1200])
    for step, successes in ((400, 6), (800, 7), (1200, 7)):
        _results(out, f"step_{step:06d}", successes)
    chosen, record = choose_from_results(run, out, 10)
    assert chosen == checkpoints[1200] and [c["successes"] for c in record["candidates"]] == [6, 7, 7]
    assert main([str(run), str(out), "--episodes", "10", "--record", str(tmp_path / "sel.json")]) == 0
    assert capsys.readouterr().out.strip() == str(checkpoints[1200])
    assert json.loads((tmp_path / "sel.json").read_text())["chosen"] == str(checkpoints[1200])


def test_a_missing_results_file_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    _checkpoints(tmp_path / "run", [400, 800])
    _results(tmp_path / "out", "step_000400", 3)
    assert main([str(tmp_path / "run"), str(tmp_path / "out"), "--episodes", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prismatic-tr-choose-checkpoint: error:")


def test_the_shell_scripts_run_console_scripts_that_exist() -> None:
    """Every ``prismatic-tr-*`` command a shell script runs is one of pyproject's console scripts."""
    import tomllib

    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    used = {name for sh in [*ROOT.glob("scripts/*.sh"), *ROOT.glob("benchmarks/**/*.sh")]
            for name in re.findall(r"prismatic-tr-[a-z-]+[a-z]", sh.read_text())}
    assert used and used <= scripts, sorted(used - scripts)
