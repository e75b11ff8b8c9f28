"""Does a MetaWorld OFT policy use its state? The measurements of ``benchmarks/metaworld_state_use.py``: where the
action slots attend on a first observation (:func:`prismatic_tr.bench.vla.oft_attention.slot_attention_shares`), and
the policy's first action beside MetaWorld's scripted expert's along the expert's own path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prismatic_tr.cli import BadInputError

DATASET = "metaworld_mt10"
EVERY = 8          # the policy is asked every 8th expert step (a chunk's length)
MAX_STEPS = 120    # expert steps per episode at most


def state_use(vla_path: Path, task: str, episodes: int, split: str) -> Iterator[str]:
    """Load the causal OFT policy at ``vla_path`` (:class:`~prismatic_tr.cli.BadInputError` for another) and yield
    the report's lines as they are measured: the action slots' attention share per layer on the first observation of
    the first ``split`` episode of ``task``, then, over ``episodes`` expert-driven episodes (every :data:`EVERY`-th
    step, at most :data:`MAX_STEPS`), per axis the correlation, spreads and mean absolute difference of the policy's
    first action and the expert's."""
    from prismatic_tr.bench.vla.oft_attention import slot_attention_shares
    from prismatic_tr.envs.metaworld.env import MetaWorldEnv, scripted_expert
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.splits import split_seeds
    from prismatic_tr.models import load_vla

    vla, processor = load_vla(vla_path)
    if vla.oft.attention != "causal" or vla.oft.proprio_dim is None:
        raise BadInputError(f"--vla_path {str(vla_path)!r} has attention {vla.oft.attention!r} and proprio_dim "
                            f"{vla.oft.proprio_dim}; allowed: causal policies with a state")
    expert_actions, policy_actions = [], []
    for n, seed in enumerate(split_seeds(split, episodes, splits=METAWORLD_SPLITS)):
        env = MetaWorldEnv(task)
        obs, expert = env.reset(seed), scripted_expert(task)
        if n == 0:
            yield f"{task}, {split} seed {seed}, first observation: the action slots' attention share"
            for r in slot_attention_shares(vla, policy_inputs(vla, processor, obs)):
                yield (f"  layer {r['layer']}: proprio {r['proprio']:.4f} (uniform {r['uniform']:.4f}), visual "
                       f"{r['visual']:.3f}, prompt {r['prompt']:.3f}, slots {r['slots']:.3f}")
        for step in range(MAX_STEPS):
            action = expert(obs)
            if step % EVERY == 0:
                with torch.no_grad():
                    actions, _ = vla.predict_action(**policy_inputs(vla, processor, obs))  # (actions, hidden states)
                    chunk = np.asarray(actions).reshape(vla.oft.num_actions_chunk, -1)
                expert_actions.append(action[:3])
                policy_actions.append(chunk[0, :3])
            obs = env.step(action).observation
            if env.done:
                break
        env.close()
    e, p = np.stack(expert_actions), np.stack(policy_actions)
    yield (f"first action of the policy against the expert's, {len(e)} observations on the expert's path "
           f"({episodes} {split} episodes, every {EVERY}th step):")
    for axis, name in enumerate("xyz"):
        r = np.corrcoef(e[:, axis], p[:, axis])[0, 1]
        yield (f"  {name}: correlation {r:+.2f}, spread expert {e[:, axis].std():.4f} m, policy "
               f"{p[:, axis].std():.4f} m, mean |difference| {np.abs(e[:, axis] - p[:, axis]).mean():.4f} m")


def policy_inputs(vla: Any, processor: Any, obs: Any) -> dict[str, Any]:
    """``predict_action``'s keyword arguments for one MetaWorld observation: the cameras the policy takes, the
    prompt, the state normalised with the policy's ``metaworld_mt10`` statistics, greedy decoding."""
    from PIL import Image

    from prismatic_tr.models.oft import camera_inputs, normalize_oft_proprio
    from prismatic_tr.models.tokenizer import build_prompt

    views = [[Image.fromarray(obs.image)], [Image.fromarray(obs.wrist_image)]]
    out = camera_inputs(processor, [build_prompt(obs.instruction)], views[: vla.vision_backbone.get_num_images_in_input()])
    out["proprio"] = normalize_oft_proprio(obs.state[None].astype(np.float64), vla.norm_stats[DATASET]["proprio"],
                                           vla.oft.normalization).astype(np.float32)
    return {**out, "unnorm_key": DATASET, "do_sample": False}
