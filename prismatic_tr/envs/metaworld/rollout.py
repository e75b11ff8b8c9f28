"""Running a policy in a MetaWorld episode: ``rollout(env, policy_fn, seed)`` -> :class:`EpisodeResult`.

    from prismatic_tr.envs.metaworld import MetaWorldEnv, rollout, scripted_expert
    with MetaWorldEnv("pick-place-v3") as env:
        result = rollout(env, scripted_expert("pick-place-v3"), seed=0, record=True)

The result is the tabletop task's :class:`prismatic_tr.envs.rollout.EpisodeResult`, so the same RLDS writer
(:func:`prismatic_tr.envs.rlds.write_episodes` with ``third_person=True``) stores it in OFT's LIBERO layout:
``third_person_images`` the primary ``corner3`` frames, ``images`` the wrist (``gripperPOV``) frames, ``states``
the (7,) float32 states, ``actions`` the policy's (7,) actions; ``kind`` is the task's name and ``target`` the
episode's object / goal vector as text.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

from prismatic_tr.envs.env import RUNNING
from prismatic_tr.envs.metaworld.env import MetaWorldEnv, MetaWorldPolicyFn, scripted_expert
from prismatic_tr.envs.metaworld.tasks import DEFAULT_IMAGE_SIZE, MT10, RENDER_SHADOWS
from prismatic_tr.envs.rollout import EpisodeResult


def rollout(env: MetaWorldEnv, policy_fn: MetaWorldPolicyFn, seed: int, record: bool = False) -> EpisodeResult:
    """Reset ``env`` to ``seed`` and run ``policy_fn`` until success or the env's ``max_steps``; with ``record``
    keep every step's frames (observation before the action), state and action, and the frames after the last."""
    obs = env.reset(seed)
    result = EpisodeResult(int(seed), env.instruction, env.task.name, env.target, RUNNING, 0)
    while not env.done:
        action = np.asarray(policy_fn(obs), dtype=np.float32)
        if record:
            if obs.image is None:
                raise ValueError("record=True needs frames; make the MetaWorldEnv with render=True")
            result.third_person_images.append(obs.image)
            result.images.append(obs.wrist_image)
            result.states.append(obs.state)
            result.actions.append(action)
        obs = env.step(action).observation
    result.outcome, result.steps = env.outcome, env.steps
    if record:
        result.final_image = obs.wrist_image
    return result


def expert_table(seeds: Iterable[int], max_steps: int | None = None, tasks: Iterable[str] = MT10,
                 image_size: int | None = None, shadows: bool = RENDER_SHADOWS) -> str:
    """The scripted expert on ``seeds`` of every task: success and steps (mean / p95 / max of the successful
    episodes), one line a task; ``max_steps``: the cap (default: each task's); ``image_size``: also render both
    cameras at that size and give the wall time per step (resets included)."""
    lines, seeds = [], list(seeds)
    for task in tasks:
        with MetaWorldEnv(task, image_size or DEFAULT_IMAGE_SIZE, image_size is not None, max_steps, shadows) as env:
            start = time.perf_counter()
            results = [rollout(env, scripted_expert(task), s) for s in seeds]
            seconds = time.perf_counter() - start
        steps = np.array([r.steps for r in results if r.success] or [0])
        failed = [r.seed for r in results if not r.success]
        timing = f"  {1000 * seconds / sum(r.steps for r in results):.0f} ms/step" if image_size else ""
        lines.append(f"{task:<25} success {len(seeds) - len(failed)}/{len(seeds)}  steps mean {steps.mean():.0f} "
                     f"p95 {np.percentile(steps, 95):.0f} max {steps.max()}{timing}"
                     + (f"  failed seeds {failed}" if failed else ""))
    return "\n".join(lines)
