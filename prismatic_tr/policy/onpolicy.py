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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from prismatic_tr.envs import TaskConfig, make_episode
from prismatic_tr.envs.rollout import EpisodeResult
from prismatic_tr.policy.closed_loop import policy_actions

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
