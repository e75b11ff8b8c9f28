"""Which checkpoint of a training run to keep: the one rule every recipe and script uses.

Of a run's saved checkpoints (``step_N``), the one with the most successes on the validation episodes; among equals
the later step, which trained longer. With no validation episodes, or one checkpoint, the last step's. A recipe that
scores several tasks may set a per-task floor (``floor``: validation successes every task must reach): the choice
is then made among the checkpoints that reach it on every task, and among all of them only when none does (the
MetaWorld recipe's ``--task_floor``: a checkpoint that gains on easy tasks while one task collapses is not the best). The recipes
(:mod:`prismatic_tr.policy.train`, :mod:`~prismatic_tr.policy.oft_recipe`, :mod:`~prismatic_tr.policy.metaworld_recipe`)
score each checkpoint themselves; ``scripts/finetune_reduced.sh`` has ``eval_policy.py`` score them and reads its
results files (:func:`choose_from_results`, the command ``prismatic-tr-choose-checkpoint``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prismatic_tr.envs.splits import VALIDATION

RULE = "most validation successes{over}, ties to the later step"
FLOOR_RULE = "among the checkpoints with >= {floor} of {episodes} validation successes on every task (all of them " \
             "when none has), " + RULE
LAST = "the last step's checkpoint"


def step_of(path: str | Path) -> int:
    """The step of a ``step_N`` checkpoint directory; ValueError for any other name."""
    found = re.fullmatch(r"step_(\d+)", Path(path).name)
    if found is None:
        raise ValueError(f"{str(path)!r} is not a step_N checkpoint directory")
    return int(found.group(1))


def checkpoints_in(directory: str | Path) -> dict[int, Path]:
    """{step: path} of the ``step_N`` checkpoint directories (each with a ``config.json``) in ``directory``."""
    return {step_of(p): p for p in sorted(Path(directory).glob("step_*"))
            if p.is_dir() and (p / "config.json").is_file()}


def best_step(successes: Mapping[int, float]) -> int:
    """The step with the most successes; ties to the later step."""
    return max(successes, key=lambda step: (successes[step], step))


def reaches_floor(score: Mapping[str, Any], floor: int) -> bool:
    """Whether a checkpoint's score (``per_task``: {task: successes}) has at least ``floor`` successes on every
    task; ValueError when a floor is asked of a score without ``per_task``."""
    if "per_task" not in score:
        raise ValueError(f"a per-task floor ({floor}) needs each checkpoint's per_task successes; the score holds "
                         f"{sorted(score)}")
    return all(n >= floor for n in score["per_task"].values())


def choose_checkpoint(checkpoints: Mapping[int, Path], episodes: int, score: Callable[[Path], dict[str, Any]],
                      count_key: str = "episodes", over: str = "", floor: int = 0) -> tuple[Path, dict[str, Any]]:
    """The checkpoint whose ``score(path)`` (a dict with ``successes``, kept in the record) is highest over
    ``episodes`` validation episodes, ties to the later step; the last step's without scoring when ``episodes`` is
    0 or there is one checkpoint. With ``floor`` > 0 the choice is among the checkpoints whose ``per_task``
    successes all reach it (:func:`reaches_floor`), among all when none does. Returns it and the selection record
    (``count_key``: the episodes' key; ``over``: words added to the rule, e.g. " over the tasks")."""
    if not checkpoints:
        raise ValueError("no checkpoint to choose from")
    if floor < 0 or floor > max(episodes, 0):
        raise ValueError(f"floor {floor!r} is not allowed; use 0 (none) to {episodes} (the episodes per task)")
    steps = sorted(checkpoints)
    if episodes == 0 or len(steps) == 1:
        return checkpoints[steps[-1]], {count_key: 0, "rule": LAST, "candidates": [str(checkpoints[steps[-1]])]}
    scores = {s: {"step": s, "checkpoint": str(checkpoints[s]), **score(checkpoints[s])} for s in steps}
    eligible = [s for s in steps if reaches_floor(scores[s], floor)] if floor else steps
    best = best_step({s: scores[s]["successes"] for s in (eligible or steps)})
    rule = FLOOR_RULE.format(floor=floor, episodes=episodes, over=over) if floor else RULE.format(over=over)
    return checkpoints[best], {count_key: episodes, "split": VALIDATION, "rule": rule,
                               **({"task_floor": floor, "reach_floor": eligible} if floor else {}),
                               "candidates": list(scores.values()), "chosen": str(checkpoints[best])}


def reduced_result(results: Path) -> dict[str, Any]:
    """``successes`` and ``success_rate`` of the first reduced setting (not ``none``) in an ``eval_policy.py``
    ``results.json``: the setting the checkpoint carries (``--settings own``)."""
    records = json.loads(Path(results).read_text())["records"]
    rows = [r for r in records if r["setting"] != "none"]
    if not rows:
        raise ValueError(f"{results} holds no reduced setting (only {[r['setting'] for r in records]})")
    return {"successes": rows[0]["successes"], "success_rate": rows[0]["success_rate"]}


def choose_from_results(run: str | Path, results_dir: str | Path, episodes: int) -> tuple[Path, dict[str, Any]]:
    """The checkpoint of ``run`` (its ``checkpoints/step_N``) by :func:`choose_checkpoint`, each scored from
    ``results_dir/eval_val_step_N/results.json`` (``eval_policy.py --settings own`` on ``episodes`` validation
    episodes)."""
    checkpoints = checkpoints_in(Path(run) / "checkpoints")
    return choose_checkpoint(checkpoints, episodes,
                             lambda c: reduced_result(Path(results_dir) / f"eval_val_{c.name}" / "results.json"))


def main(argv: Sequence[str] | None = None) -> int:
    """``prismatic-tr-choose-checkpoint RUN RESULTS_DIR --episodes N``: print the chosen checkpoint's path (exit 2,
    one line, when a checkpoint or a results file is missing)."""
    parser = argparse.ArgumentParser(prog="prismatic-tr-choose-checkpoint", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run directory (holds checkpoints/step_N)")
    parser.add_argument("results_dir", type=Path, help="holds eval_val_step_N/results.json per checkpoint")
    parser.add_argument("--episodes", type=int, required=True, help="validation episodes each was scored on")
    parser.add_argument("--record", type=Path, default=None, help="also write the selection record (JSON) here")
    args = parser.parse_args(argv)
    try:
        chosen, record = choose_from_results(args.run, args.results_dir, args.episodes)
    except (OSError, ValueError, KeyError) as err:
        print(f"prismatic-tr-choose-checkpoint: error: {err}", file=sys.stderr)
        return 2
    if args.record is not None:
        args.record.write_text(json.dumps(record, indent=2) + "\n")
    print(chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
