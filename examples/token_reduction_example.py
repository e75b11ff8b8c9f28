"""What token reduction does to a trained policy, on a CPU in under a minute.

    python examples/token_reduction_example.py                 # 6 held-out test episodes per setting
    python examples/token_reduction_example.py --episodes 20 --split validation

The bundled tabletop policy (a small OpenVLA trained here, ``prismatic_tr/assets/tabletop_policy``) drives
``--episodes`` closed-loop episodes of the tabletop task in three settings:

1. unreduced: the language model receives all 256 patch tokens (both vision towers cut the 224 px image
   into the same 16 x 16 patches, fused patch by patch);
2. the default selection (``diverse_merge``) at the ``vision`` site, keeping 0.1 of the tokens after 1/4 of the
   tower blocks, training-free;
3. the same setting with its shipped LoRA adapter (``load_adapted_policy("vision-diverse_merge-0.1-0.25")``).

Per setting it prints the visual tokens the language model receives, the action on one fixed observation
and the episodes that succeeded. A handful of episodes shows the effect, not a measurement: the README's
figures come from 100+ episodes. Speed is not timed here (one timing on a shared CPU means little); the
main job measures it: ``python vla_scripts/benchmark.py``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch

from experiments.robot.token_reduction_utils import (
    apply_token_reduction_to_vla,
    remove_token_reduction,
    visual_token_count,
)
from prismatic_tr.envs import make_episode
from prismatic_tr.envs.splits import split_seeds
from prismatic_tr.models import build_prompt
from prismatic_tr.policy import UNNORM_KEY, load_bundled_policy, run_episodes
from prismatic_tr.policy.adapters import load_adapted_policy

ADAPTER = "vision-diverse_merge-0.1-0.25"
SETTING = {"site": "vision", "method": "diverse_merge", "reduction_ratio": 0.1, "depth_fraction": 0.25}  # the adapter's


def report(label: str, vla: torch.nn.Module, processor: Any, seeds: range) -> None:
    """One row: visual tokens the LLM receives, the action on the first episode's first frame, successes."""
    obs = make_episode(seeds[0]).reset()
    inputs = processor(build_prompt(obs.instruction), obs.image)
    action = vla.predict_action(**inputs, unnorm_key=UNNORM_KEY, do_sample=False)
    successes = sum(o.success for o in run_episodes(vla, processor, seeds, UNNORM_KEY))
    shown = np.array2string(np.asarray(action), precision=3, suppress_small=True, floatmode="fixed")
    print(f"{label:<50} {visual_token_count(vla):>6}  {shown}  {successes}/{len(seeds)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=6, help="closed-loop episodes per setting (default 6)")
    parser.add_argument("--split", default="test", choices=["test", "validation"],
                        help="seed split of the episodes (default: test, held out from training and choices)")
    args = parser.parse_args()
    try:
        seeds = split_seeds(args.split, args.episodes, job=f"--episodes {args.episodes}")
    except ValueError as err:
        parser.error(str(err))

    # The policy is small: one thread runs it as fast, and two stall each other on a busy machine (this example
    # on 2 shared cores: 38 s with one thread, 332 s with two).
    torch.set_num_threads(1)
    vla, processor = load_bundled_policy()
    adapted, _ = load_adapted_policy(ADAPTER)  # the bundled policy with the LoRA merged in and its setting attached
    print(f"Bundled tabletop policy, {len(seeds)} episodes of the {args.split} split (seeds {seeds[0]:,}-{seeds[-1]:,}).")
    print(f'Action: on the first frame of episode {seeds[0]:,}, "{make_episode(seeds[0]).instruction}" '
          "(dx dy dz droll dpitch dyaw gripper).\n")
    print(f"{'setting':<50} {'tokens':>6}  {'action':<50}  success")
    report("unreduced", vla, processor, seeds)
    apply_token_reduction_to_vla(vla, **SETTING)
    report("vision diverse_merge keep 0.1 after 1/4, training-free", vla, processor, seeds)
    remove_token_reduction(vla)
    report(f"same + shipped adapter {ADAPTER}", adapted, processor, seeds)
    print("\ntokens: visual tokens the language model receives per image. Speed is not timed here (one timing on a "
          "shared CPU means little): the main job measures it, `python vla_scripts/benchmark.py`, results in "
          "benchmarks/results/policy/.")


if __name__ == "__main__":
    main()
