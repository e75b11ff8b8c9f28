"""Closed-loop evaluation: a VLA drives the tabletop task (``prismatic_tr.envs``) episode after episode.

Episodes run in lockstep batches: every prediction, the images and instructions of the episodes still running go
through the processor (OpenVLA's prompt, right padding) and one batched ``predict_action``; each action
moves its own episode. A batch of episodes takes the same actions as running them one by one, up to float
rounding in padded batches (checked in ``tests/policy/test_policy.py``), only faster.

An OpenVLA-OFT model (``NativeOpenVLAOFT``) sees what OFT's LIBERO evaluation gives it: the third-person camera
first, then the eye-in-hand one (the episodes are made with ``third_person=True``), and the proprio state
normalised with the ``unnorm_key``'s statistics; it answers a chunk, and the first ``execute_steps`` of its actions
(default: all of them, OFT's rule) run open loop before the next prediction.
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
from prismatic_tr.envs.env import Observation
from prismatic_tr.eval.intervals import wilson_interval
from prismatic_tr.models.family import family_of
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


def record_successes(record: dict[str, Any]) -> dict[int, bool]:
    """``{seed: succeeded}`` for every episode of an :func:`evaluation_record` (the inverse of its seeds and failed
    seeds; ``failed_seeds`` may also be one list, as records written before the outcomes were split). ValueError
    when the record cannot give them: its ``episodes`` are not the consecutive seeds it spans, or a failed seed lies
    outside them."""
    first, last = record.get("seeds") or (0, -1)
    seeds = range(int(first), int(last) + 1)
    if len(seeds) != record["episodes"]:
        raise ValueError(f"a record of {record['episodes']} episodes spanning seeds {record.get('seeds')} does not "
                         "name each episode's seed; only consecutive seeds can be read back")
    held = record["failed_seeds"]
    failed = set(held) if isinstance(held, list) else {s for group in held.values() for s in group}
    outside = failed.difference(seeds)
    if outside:
        raise ValueError(f"failed seeds {sorted(outside)} lie outside the record's seeds {first}-{last}")
    if len(seeds) - len(failed) != record["successes"]:
        raise ValueError(f"the record counts {record['successes']} successes, its failed seeds leave "
                         f"{len(seeds) - len(failed)}")
    return {s: s not in failed for s in seeds}


def policy_actions(vla: nn.Module, processor: object, envs: list[TabletopEnv], images: list[np.ndarray],
                 unnorm_key: str) -> np.ndarray:
    """(n, 7) actions for the episodes' current images, one batched predict_action."""
    inputs = processor([build_prompt(e.instruction) for e in envs], images)
    actions = vla.predict_action(**inputs, unnorm_key=unnorm_key, do_sample=False)
    return np.asarray(actions, dtype=np.float64).reshape(len(envs), -1)


def oft_inputs(vla: nn.Module, processor: object, envs: list[TabletopEnv], observations: list[Observation],
               unnorm_key: str) -> dict[str, Any]:
    """The keyword arguments of an OFT model's batched ``predict_action`` for the episodes' current observations:
    the third-person camera, then the eye-in-hand one (as many as the model takes), and the proprio state
    normalised with the ``unnorm_key``'s statistics as OFT's client does."""
    from prismatic_tr.models.oft import camera_inputs, normalize_oft_proprio

    views = [[o.third_person for o in observations], [o.image for o in observations]]
    if any(v is None for v in views[0]):
        raise ValueError("an OFT policy needs the third-person camera: make the episodes with third_person=True")
    inputs = camera_inputs(processor, [build_prompt(e.instruction) for e in envs],
                           views[: vla.vision_backbone.get_num_images_in_input()])
    if vla.proprio_projector is not None:
        state = np.stack([o.proprio for o in observations]).astype(np.float64)
        inputs["proprio"] = normalize_oft_proprio(state, vla.norm_stats[unnorm_key]["proprio"],
                                                  vla.oft.normalization).astype(np.float32)
    return {**inputs, "unnorm_key": unnorm_key, "do_sample": False}


def oft_chunks(vla: nn.Module, processor: object, envs: list[TabletopEnv], observations: list[Observation],
               unnorm_key: str) -> np.ndarray:
    """(n, chunk, action_dim) actions of an OFT model for the episodes' current observations, one batched
    predict_action (:func:`oft_inputs`)."""
    oft = vla.oft
    actions, _ = vla.predict_action(**oft_inputs(vla, processor, envs, observations, unnorm_key))  # OFT's pair
    return np.asarray(actions, dtype=np.float64).reshape(len(envs), oft.num_actions_chunk, oft.action_dim)


@dataclass(frozen=True)
class Observing:
    """How a model family sees the episodes and acts on them (:data:`OBSERVATIONS`).

    inputs(vla, processor, env, observation, unnorm_key): ``predict_action``'s keyword arguments for one episode's
        observation (batch 1).
    chunks(vla, processor, envs, observations, unnorm_key): (n, c, 7) actions for the episodes' observations.
    chunk(vla): c, the actions one prediction gives (run open loop before the next one).
    proprio_dim(vla): the size of the state the model takes, None for none.
    third_person: its episodes render the third-person camera (OFT's first image) besides the eye-in-hand one.
    """

    inputs: Callable[[nn.Module, object, TabletopEnv, Observation, str], dict[str, Any]]
    chunks: Callable[[nn.Module, object, list[TabletopEnv], list[Observation], str], np.ndarray]
    chunk: Callable[[nn.Module], int]
    proprio_dim: Callable[[nn.Module], int | None]
    third_person: bool


def _openvla_inputs(vla: nn.Module, processor: object, env: TabletopEnv, observation: Observation,
                    unnorm_key: str) -> dict[str, Any]:
    return {**processor(build_prompt(env.instruction), observation.image), "unnorm_key": unnorm_key,
            "do_sample": False}


def _openvla_chunks(vla: nn.Module, processor: object, envs: list[TabletopEnv], observations: list[Observation],
                    unnorm_key: str) -> np.ndarray:
    return policy_actions(vla, processor, envs, [o.image for o in observations], unnorm_key)[:, None]


def _oft_inputs(vla: nn.Module, processor: object, env: TabletopEnv, observation: Observation,
                unnorm_key: str) -> dict[str, Any]:
    return oft_inputs(vla, processor, [env], [observation], unnorm_key)


_OPENVLA = Observing(_openvla_inputs, _openvla_chunks, chunk=lambda vla: 1, proprio_dim=lambda vla: None,
                     third_person=False)
_OFT = Observing(_oft_inputs, oft_chunks, chunk=lambda vla: vla.oft.num_actions_chunk,
                 proprio_dim=lambda vla: vla.oft.proprio_dim, third_person=True)
# How each model family (prismatic_tr.models.family) sees an episode: OpenVLA's one image and one action a
# prediction, or the native OpenVLA-OFT model's cameras, state and chunk (OFT's own code is driven as OpenVLA's).
OBSERVATIONS: dict[str, Observing] = {"openvla": _OPENVLA, "openvla-remote": _OPENVLA, "openvla-oft": _OFT,
                                      "openvla-oft-remote": _OPENVLA}


def observing(vla: nn.Module) -> Observing:
    """How ``vla``'s family sees the episodes (:data:`OBSERVATIONS`)."""
    return OBSERVATIONS[family_of(vla).name]


def policy_inputs(vla: nn.Module, processor: object, env: TabletopEnv, observation: Observation,
                  unnorm_key: str) -> dict[str, Any]:
    """The keyword arguments of ``predict_action`` for one episode's observation (batch 1), for either kind of
    model: what the closed loop passes, so a timing of this call is a timing of one closed-loop step."""
    return observing(vla).inputs(vla, processor, env, observation, unnorm_key)


def policy_chunks(vla: nn.Module, processor: object, envs: list[TabletopEnv], observations: list[Observation],
                  unnorm_key: str) -> np.ndarray:
    """(n, c, 7): an OFT model's chunks (c its chunk length), or an OpenVLA model's actions as chunks of one."""
    return observing(vla).chunks(vla, processor, envs, observations, unnorm_key)


@torch.no_grad()
def run_episodes(
    vla: nn.Module,
    processor: object,
    seeds: Sequence[int],
    unnorm_key: str,
    config: TaskConfig | None = None,
    batch_size: int = 16,
    on_episode: Callable[[EpisodeOutcome], None] | None = None,
    execute_steps: int | None = None,
    make_env: Callable[[int], Any] | None = None,
) -> list[EpisodeOutcome]:
    """Run episode ``seed`` of the task for every seed (``config``: the task distribution, default the
    demonstrations' one) with ``vla`` in lockstep batches of ``batch_size``; outcomes in the order of ``seeds``.

    ``on_episode`` is called as each episode ends (progress bars). ``execute_steps``: actions of each predicted
    chunk executed open loop before the next prediction (an OFT model; default and at most: its whole chunk; an
    OpenVLA model predicts one action at a time). ``make_env(seed)``: another task's episode with the tabletop
    episode's interface (``reset()``, ``step(action) -> obs, reward, done, info``, ``seed``, ``instruction``; e.g.
    :class:`prismatic_tr.envs.metaworld.episode.MetaWorldEpisode`), closed after its batch when it has ``close()``;
    ``config`` is then unused.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is not allowed; use an integer >= 1")
    seeing = observing(vla)
    chunk = seeing.chunk(vla)
    if execute_steps is not None and (isinstance(execute_steps, bool) or not isinstance(execute_steps, int)
                                      or not 1 <= execute_steps <= chunk):
        raise ValueError(f"execute_steps={execute_steps!r} is not allowed; use an integer in [1, {chunk}] (the "
                         "model's chunk) or None for the whole chunk")
    run_for = execute_steps or chunk
    outcomes: list[EpisodeOutcome] = []
    for start in range(0, len(seeds), batch_size):
        batch = [int(s) for s in seeds[start : start + batch_size]]
        envs = ([make_env(s) for s in batch] if make_env is not None
                else [make_episode(s, config, third_person=seeing.third_person) for s in batch])
        try:
            outcomes.extend(_run_batch(vla, processor, envs, unnorm_key, run_for, on_episode))
        finally:
            for env in envs:
                getattr(env, "close", lambda: None)()
    return outcomes


def _run_batch(vla: nn.Module, processor: object, envs: list[Any], unnorm_key: str, run_for: int,
               on_episode: Callable[[EpisodeOutcome], None] | None) -> list[EpisodeOutcome]:
    """One lockstep batch of :func:`run_episodes`: every episode of ``envs`` to its end; outcomes in their order."""
    observations = [env.reset() for env in envs]
    running = list(range(len(envs)))
    done: dict[int, EpisodeOutcome] = {}
    while running:
        chunks = policy_chunks(vla, processor, [envs[i] for i in running], [observations[i] for i in running],
                               unnorm_key)
        for k in range(run_for):
            still = []
            for i, actions in zip(running, chunks, strict=True):
                if i in done:
                    continue
                obs, _, finished, info = envs[i].step(actions[k])
                observations[i] = obs
                if finished:
                    done[i] = EpisodeOutcome(envs[i].seed, envs[i].instruction, info.outcome, info.steps)
                    if on_episode is not None:
                        on_episode(done[i])
                else:
                    still.append(i)
            if not still:
                break
        running = [i for i in running if i not in done]
    return [done[i] for i in range(len(envs))]
