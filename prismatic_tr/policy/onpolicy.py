"""On-policy training data for a reduced policy: the reduced policy drives, the unreduced policy labels.

Demonstrations show the states the expert visits. A policy under reduction drifts off them (on the bundled policy
its failures are timeouts: it hovers near the object), and fine-tuning on the expert's states alone, with or
without distillation, did not teach it to come back (``benchmarks/results/finetune_reduced/``). DAgger's remedy
(Ross, Gordon and Bagnell, AISTATS 2011), written here for self-distillation: run the *student* (the policy with the
reduction attached) in the task, and record at every step the image it saw with the action the *teacher* (the
same policy unreduced) takes there. Fine-tuning on these episodes, with the KL to the teacher on, trains the
student where it actually goes.

Episodes run in lockstep batches as in :func:`prismatic_tr.policy.closed_loop.run_episodes`; each step is one
batched ``predict_action`` per model.

OpenVLA-OFT policies (:func:`relabelled_oft_episodes`): the student acts as in the closed loop (a chunk, its first
``execute_steps`` actions open loop), the teacher labels every step the student visits with its whole chunk there
(``action_chunks``; ``actions`` holds the chunk's first action), with both cameras and the state recorded. Training
on these chunks with the L1 loss matches the student to the teacher on continuous actions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.envs import TaskConfig, make_episode
from prismatic_tr.envs.rollout import EpisodeResult
from prismatic_tr.policy.closed_loop import oft_chunks, policy_actions

RUNNING = "running"


@torch.no_grad()
def relabelled_episodes(
    student: nn.Module, teacher: nn.Module, processor: object, seeds: Sequence[int], unnorm_key: str,
    config: TaskConfig | None = None, batch_size: int = 25,
) -> Iterator[EpisodeResult]:
    """Yield one recorded :class:`EpisodeResult` per seed, in order: ``images`` / ``states`` are what the
    student saw and where it was, ``actions`` the teacher's actions there ((7,) float32, unnormalised), ``outcome``
    how the student's episode ended. The student's actions move the episode; the teacher's are only recorded."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is not allowed; use an integer >= 1")
    for start in range(0, len(seeds), batch_size):
        envs = [make_episode(int(s), config) for s in seeds[start : start + batch_size]]
        images = [env.reset().image for env in envs]
        results = [EpisodeResult(e.seed, e.instruction, e.kind, e.target, RUNNING, 0) for e in envs]
        running = list(range(len(envs)))
        while running:
            now_envs, now_images = [envs[i] for i in running], [images[i] for i in running]
            labels = policy_actions(teacher, processor, now_envs, now_images, unnorm_key)
            actions = policy_actions(student, processor, now_envs, now_images, unnorm_key)
            still = []
            for i, label, action in zip(running, labels, actions, strict=True):
                result = results[i]
                result.images.append(images[i])
                result.actions.append(np.asarray(label, dtype=np.float32))
                result.states.append(envs[i].state)
                obs, _, finished, info = envs[i].step(action)
                images[i] = obs.image
                if finished:
                    result.outcome, result.steps, result.final_image = info.outcome, info.steps, obs.image
                else:
                    still.append(i)
            running = still
        yield from results


@torch.no_grad()
def relabelled_oft_episodes(
    student: nn.Module, teacher: nn.Module, processor: object, seeds: Sequence[int], unnorm_key: str,
    config: TaskConfig | None = None, batch_size: int = 25, execute_steps: int | None = None,
    make_env: Callable[[int], Any] | None = None, label_replans_only: bool = False,
) -> Iterator[EpisodeResult]:
    """OFT policies: one recorded :class:`EpisodeResult` per seed, in order, made with the third-person camera.
    The student's chunks move the episode (``execute_steps`` of each, default all, open loop); at every step the
    teacher's chunk there is recorded (``action_chunks`` (chunk, 7) float32 unnormalised, ``actions`` its first
    action) with the eye-in-hand and third-person images and the state the student saw.

    ``make_env(seed)``: the episode (default: the tabletop task's, with ``config`` and the third-person camera; a
    :class:`~prismatic_tr.envs.metaworld.episode.MetaWorldEpisode` answers the same: ``reset``, ``step``,
    ``state``, ``instruction``, ``kind``, ``target``, ``close``). ``label_replans_only``: label and record only
    the steps where the student plans a chunk (one in ``execute_steps``): the observations it reads, so an
    environment that draws frames on demand (MetaWorld's) draws no more than the closed loop does; the result's
    ``steps`` still counts every step taken."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is not allowed; use an integer >= 1")
    chunk = student.oft.num_actions_chunk
    run_for = execute_steps or chunk
    if not 1 <= run_for <= chunk:
        raise ValueError(f"execute_steps={execute_steps!r} is not allowed; use an integer in [1, {chunk}] or None")
    make = make_env or (lambda seed: make_episode(seed, config, third_person=True))
    for start in range(0, len(seeds), batch_size):
        envs = [make(int(s)) for s in seeds[start : start + batch_size]]
        try:
            yield from _relabel_batch(student, teacher, processor, envs, unnorm_key, run_for, label_replans_only)
        finally:
            for env in envs:
                close = getattr(env, "close", None)
                if close is not None:
                    close()


def _relabel_batch(student: nn.Module, teacher: nn.Module, processor: object, envs: list[Any], unnorm_key: str,
                   run_for: int, label_replans_only: bool) -> list[EpisodeResult]:
    """One lockstep batch of :func:`relabelled_oft_episodes`: the recorded results, in the episodes' order."""
    observations = [env.reset() for env in envs]
    results = [EpisodeResult(e.seed, e.instruction, e.kind, e.target, RUNNING, 0) for e in envs]
    plans: dict[int, np.ndarray] = {}  # the student's chunk each running episode executes, and its position
    position: dict[int, int] = {}
    running = list(range(len(envs)))
    while running:
        replan = [i for i in running if position.get(i, run_for) >= run_for]
        if replan:
            fresh = oft_chunks(student, processor, [envs[i] for i in replan], [observations[i] for i in replan],
                               unnorm_key)
            for i, plan in zip(replan, fresh, strict=True):
                plans[i], position[i] = plan, 0
        labelled = replan if label_replans_only else running
        if labelled:
            labels = oft_chunks(teacher, processor, [envs[i] for i in labelled],
                                [observations[i] for i in labelled], unnorm_key)
            for i, label in zip(labelled, labels, strict=True):
                result, obs = results[i], observations[i]
                result.images.append(obs.image)
                result.third_person_images.append(obs.third_person)
                result.action_chunks.append(np.asarray(label, dtype=np.float32))
                result.actions.append(np.asarray(label[0], dtype=np.float32))
                result.states.append(envs[i].state)
        still = []
        for i in running:
            step = envs[i].step(plans[i][position[i]])
            position[i] += 1
            observations[i] = step.observation
            if step.done:
                results[i].outcome, results[i].steps = step.info.outcome, step.info.steps
                results[i].final_image = step.observation.image
            else:
                still.append(i)
        running = still
    return results
