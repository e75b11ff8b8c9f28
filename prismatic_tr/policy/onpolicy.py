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

from collections.abc import Iterator, Sequence

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
        results = [EpisodeResult(e.seed, e.instruction, e.scene.kind, e.scene.target_object.name, RUNNING, 0)
                   for e in envs]
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
) -> Iterator[EpisodeResult]:
    """OFT policies: one recorded :class:`EpisodeResult` per seed, in order, made with the third-person camera.
    The student's chunks move the episode (``execute_steps`` of each, default all, open loop); at every step the
    teacher's chunk there is recorded (``action_chunks`` (chunk, 7) float32 unnormalised, ``actions`` its first
    action) with the eye-in-hand and third-person images and the state the student saw."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} is not allowed; use an integer >= 1")
    chunk = student.oft.num_actions_chunk
    run_for = execute_steps or chunk
    if not 1 <= run_for <= chunk:
        raise ValueError(f"execute_steps={execute_steps!r} is not allowed; use an integer in [1, {chunk}] or None")
    for start in range(0, len(seeds), batch_size):
        envs = [make_episode(int(s), config, third_person=True) for s in seeds[start : start + batch_size]]
        observations = [env.reset() for env in envs]
        results = [EpisodeResult(e.seed, e.instruction, e.scene.kind, e.scene.target_object.name, RUNNING, 0)
                   for e in envs]
        plans: dict[int, np.ndarray] = {}  # the student's chunk each running episode executes, and its position
        position: dict[int, int] = {}
        running = list(range(len(envs)))
        while running:
            now_envs, now_obs = [envs[i] for i in running], [observations[i] for i in running]
            labels = oft_chunks(teacher, processor, now_envs, now_obs, unnorm_key)
            replan = [k for k, i in enumerate(running) if position.get(i, run_for) >= run_for]
            if replan:
                fresh = oft_chunks(student, processor, [now_envs[k] for k in replan], [now_obs[k] for k in replan],
                                   unnorm_key)
                for k, plan in zip(replan, fresh, strict=True):
                    plans[running[k]], position[running[k]] = plan, 0
            still = []
            for i, label in zip(running, labels, strict=True):
                result, obs = results[i], observations[i]
                result.images.append(obs.image)
                result.third_person_images.append(obs.third_person)
                result.action_chunks.append(np.asarray(label, dtype=np.float32))
                result.actions.append(np.asarray(label[0], dtype=np.float32))
                result.states.append(envs[i].state)
                step = envs[i].step(plans[i][position[i]])
                position[i] += 1
                observations[i] = step.observation
                if step.done:
                    result.outcome, result.steps = step.info.outcome, step.info.steps
                    result.final_image = step.observation.image
                else:
                    still.append(i)
            running = still
        yield from results
