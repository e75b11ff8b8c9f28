"""Closed-loop evaluation: a VLA drives the tabletop task (``prismatic_tr.envs``) episode after episode.

Episodes run in lockstep batches: every step, the images and instructions of the episodes still running go
through the processor (OpenVLA's prompt, right padding) and one batched ``predict_action``; each action
moves its own episode. A batch of episodes takes the same actions as running them one by one, up to float
rounding in padded batches (checked in ``tests/test_policy.py``), only faster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.envs import SUCCESS, TIMEOUT, WRONG_OBJECT, TabletopEnv, TaskConfig, make_episode
from prismatic_tr.eval.intervals import wilson_interval
from prismatic_tr.models.tokenizer import build_prompt


@dataclass(frozen=True)
class EpisodeOutcome:
    """How one episode ended: ``outcome`` "success" / "wrong_object" / "timeout", after ``steps`` steps."""

    seed: int
    instruction: str
    outcome: str
    steps: int

    @property
    def success(self) -> bool:
        return self.outcome == "success"


@dataclass(frozen=True)
class SuccessSummary:
    """Success rate with its Wilson 95 % interval, and the mean episode length."""

    episodes: int
    successes: int
    success_rate: float
    success_ci_low: float
    success_ci_high: float
    mean_steps: float

    @classmethod
    def of(cls, outcomes: Sequence[EpisodeOutcome]) -> SuccessSummary:
        n, k = len(outcomes), sum(o.success for o in outcomes)
        low, high = wilson_interval(k, n)
        mean_steps = float(np.mean([o.steps for o in outcomes])) if outcomes else float("nan")
        return cls(n, k, k / n if n else float("nan"), low, high, mean_steps)


OUTCOMES = (SUCCESS, TIMEOUT, WRONG_OBJECT)  # every way an episode ends


def outcome_counts(outcomes: Sequence[EpisodeOutcome]) -> dict[str, int]:
    """``{outcome: episodes}`` for each of :data:`OUTCOMES` (zeros included)."""
    return {name: sum(o.outcome == name for o in outcomes) for name in OUTCOMES}


def evaluation_record(outcomes: Sequence[EpisodeOutcome], split: str | None = None) -> dict[str, Any]:
    """What an evaluation found, for records: the seed ``split`` (if any) and the first and last seed, the
    :class:`SuccessSummary` (Wilson 95 % interval), outcome counts, and the seeds of the failed episodes by
    outcome (every other seed succeeded), so a record can be checked episode by episode."""
    seeds = [o.seed for o in outcomes]
    failed = {name: [o.seed for o in outcomes if o.outcome == name] for name in OUTCOMES if name != SUCCESS}
    return {"split": split, "seeds": [min(seeds), max(seeds)] if seeds else None,
            **dataclasses.asdict(SuccessSummary.of(outcomes)), "outcomes": outcome_counts(outcomes),
            "failed_seeds": failed}


def policy_actions(vla: nn.Module, processor: object, envs: list[TabletopEnv], images: list[np.ndarray],
                 unnorm_key: str) -> np.ndarray:
    """(n, 7) actions for the episodes' current images, one batched predict_action."""
    inputs = processor([build_prompt(e.instruction) for e in envs], images)
    actions = vla.predict_action(**inputs, unnorm_key=unnorm_key, do_sample=False)
    return np.asarray(actions, dtype=np.float64).reshape(len(envs), -1)


@torch.no_grad()
def run_episodes(
    vla: nn.Module,
    processor: object,
    seeds: Sequence[int],
    unnorm_key: str,
    config: TaskConfig | None = None,
    batch_size: int = 16,
    on_episode: Callable[[EpisodeOutcome], None] | None = None,
) -> list[EpisodeOutcome]:
    """Run episode ``seed`` of the task for every seed (``config``: the task distribution, default the
    demonstrations' one) with ``vla`` in lockstep batches of ``batch_size``; outcomes in the order of ``seeds``.

    ``on_episode`` is called as each episode ends (progress bars).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is not allowed; use an integer >= 1")
    outcomes: list[EpisodeOutcome] = []
    for start in range(0, len(seeds), batch_size):
        envs = [make_episode(int(s), config) for s in seeds[start : start + batch_size]]
        images = [env.reset().image for env in envs]
        running = list(range(len(envs)))
        done: dict[int, EpisodeOutcome] = {}
        while running:
            actions = policy_actions(vla, processor, [envs[i] for i in running], [images[i] for i in running],
                                   unnorm_key)
            still = []
            for i, action in zip(running, actions, strict=True):
                obs, _, finished, info = envs[i].step(action)
                images[i] = obs.image
                if finished:
                    done[i] = EpisodeOutcome(envs[i].seed, envs[i].instruction, info.outcome, info.steps)
                    if on_episode is not None:
                        on_episode(done[i])
                else:
                    still.append(i)
            running = still
        outcomes.extend(done[i] for i in range(len(envs)))
    return outcomes
