"""Does a MetaWorld OFT policy use its state? Where its action slots attend, and how its actions follow the expert's.

    python benchmarks/metaworld_state_use.py --vla_path outputs/metaworld_policy/policy --task reach-v3 --episodes 3

Two measurements on seeds of ``--task`` from ``--split`` (validation by default, or the demonstrations' own seeds to
compare with what the policy was trained on; never the test split), for a causal policy:

* **attention**: on the first observation of the first episode, per layer of the language model, the mean share of
  attention that the positions the L1 head reads give to the proprio token, to all visual tokens, to the prompt and
  to the slots, next to the share one token would get if attention were uniform
  (:func:`prismatic_tr.bench.vla.oft_attention.slot_attention_shares`).
* **actions along the expert's path**: MetaWorld's scripted expert drives ``--episodes`` episodes (at most 120
  steps each); every 8th step the policy predicts a chunk from the same observation, and its first action is set
  beside the expert's action there. Per axis (x, y, z in metres): the correlation between them, their spreads and
  the mean absolute difference. A policy that ignores what varies between episodes (the goal, the object) shows a
  small spread and a low correlation on the axes that depend on it.

Needs the metaworld extra and OSMesa. Measures no time.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

DATASET = "metaworld_mt10"
EVERY = 8          # the policy is asked every 8th expert step (a chunk's length)
MAX_STEPS = 120    # expert steps per episode at most


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from prismatic_tr.envs.metaworld.tasks import MT10, metaworld_task

    ap = argparse.ArgumentParser(prog="metaworld_state_use.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vla_path", type=Path, required=True, help="an OFT checkpoint with metaworld_mt10 statistics")
    ap.add_argument("--task", default="reach-v3", help=f"one of {list(MT10)}")
    ap.add_argument("--episodes", type=int, default=3, help="episodes driven by the expert (>= 1)")
    ap.add_argument("--split", default="validation", choices=["validation", "demonstrations"],
                    help="whose seeds: validation (unseen goals) or demonstrations (the training episodes)")
    args = ap.parse_args(argv)
    try:
        metaworld_task(args.task)
    except ValueError as err:
        ap.error(str(err))
    if args.episodes < 1:
        ap.error(f"--episodes {args.episodes} is not allowed; use an integer >= 1")
    if not (args.vla_path / "config.json").is_file():
        ap.error(f"--vla_path {str(args.vla_path)!r} is not a checkpoint directory (no config.json)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from PIL import Image

    from prismatic_tr.bench.vla.oft_attention import slot_attention_shares
    from prismatic_tr.envs.metaworld.env import MetaWorldEnv, scripted_expert
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.splits import split_seeds
    from prismatic_tr.models import load_vla
    from prismatic_tr.models.oft import camera_inputs, normalize_oft_proprio
    from prismatic_tr.models.tokenizer import build_prompt

    vla, processor = load_vla(args.vla_path)
    if vla.oft.attention != "causal" or vla.oft.proprio_dim is None:
        print(f"metaworld_state_use.py: error: --vla_path {str(args.vla_path)!r} has attention "
              f"{vla.oft.attention!r} and proprio_dim {vla.oft.proprio_dim}; allowed: causal policies with a state",
              file=sys.stderr)
        return 2
    stats = vla.norm_stats[DATASET]["proprio"]

    def inputs_of(obs: Any) -> dict[str, Any]:
        views = [[Image.fromarray(obs.image)], [Image.fromarray(obs.wrist_image)]]
        out = camera_inputs(processor, [build_prompt(obs.instruction)],
                            views[: vla.vision_backbone.get_num_images_in_input()])
        out["proprio"] = normalize_oft_proprio(obs.state[None].astype(np.float64), stats,
                                               vla.oft.normalization).astype(np.float32)
        return {**out, "unnorm_key": DATASET, "do_sample": False}

    expert_actions, policy_actions = [], []
    for n, seed in enumerate(split_seeds(args.split, args.episodes, splits=METAWORLD_SPLITS)):
        env = MetaWorldEnv(args.task)
        obs, expert = env.reset(seed), scripted_expert(args.task)
        if n == 0:
            print(f"{args.task}, {args.split} seed {seed}, first observation: the action slots' attention share")
            for r in slot_attention_shares(vla, inputs_of(obs)):
                print(f"  layer {r['layer']}: proprio {r['proprio']:.4f} (uniform {r['uniform']:.4f}), visual "
                      f"{r['visual']:.3f}, prompt {r['prompt']:.3f}, slots {r['slots']:.3f}")
        for step in range(MAX_STEPS):
            action = expert(obs)
            if step % EVERY == 0:
                with torch.no_grad():
                    chunk = np.asarray(vla.predict_action(**inputs_of(obs))).reshape(vla.oft.num_actions_chunk, -1)
                expert_actions.append(action[:3])
                policy_actions.append(chunk[0, :3])
            obs = env.step(action).observation
            if env.done:
                break
        env.close()
    e, p = np.stack(expert_actions), np.stack(policy_actions)
    print(f"first action of the policy against the expert's, {len(e)} observations on the expert's path "
          f"({args.episodes} {args.split} episodes, every {EVERY}th step):")
    for axis, name in enumerate("xyz"):
        r = np.corrcoef(e[:, axis], p[:, axis])[0, 1]
        print(f"  {name}: correlation {r:+.2f}, spread expert {e[:, axis].std():.4f} m, policy {p[:, axis].std():.4f} m,"
              f" mean |difference| {np.abs(e[:, axis] - p[:, axis]).mean():.4f} m")
    return 0


if __name__ == "__main__":
    sys.exit(main())
