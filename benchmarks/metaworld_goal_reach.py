"""Where a MetaWorld policy's hand goes, against where the goal is: does the policy read the goal's position?

    python benchmarks/metaworld_goal_reach.py --vla_path outputs/metaworld_policy/policy --task reach-v3 --episodes 10

Runs ``--episodes`` episodes of ``--task`` from the validation seeds (never the test split) in one lockstep batch and
prints, per episode: the outcome, the goal (MetaWorld's ``obs[-3:]``), the hand's first and last positions (``obs[:3]``,
MetaWorld's hand body, a few centimetres above the point between the fingers that reach's success reads), its
closest approach to the goal; then the correlation over episodes between the goal's and the final hand's x and y
(near 1: the hand follows the goal; near 0: it goes to the same place whatever the goal). Needs the metaworld
extra and OSMesa. Measures no time.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from prismatic_tr.cli import check_int_flag
    from prismatic_tr.envs.metaworld.tasks import MT10, metaworld_task

    ap = argparse.ArgumentParser(prog="metaworld_goal_reach.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vla_path", type=Path, required=True, help="an OFT checkpoint with metaworld_mt10 statistics")
    ap.add_argument("--task", default="reach-v3", help=f"one of {list(MT10)}")
    ap.add_argument("--episodes", type=int, default=10, help="validation episodes (>= 2)")
    args = ap.parse_args(argv)
    try:
        metaworld_task(args.task)
    except ValueError as err:
        ap.error(str(err))
    try:
        check_int_flag("episodes", args.episodes, 2)
    except ValueError as err:
        ap.error(f"{err} (a correlation needs two)")
    if not (args.vla_path / "config.json").is_file():
        ap.error(f"--vla_path {str(args.vla_path)!r} is not a checkpoint directory (no config.json)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    from prismatic_tr.envs.metaworld.episode import MetaWorldEpisode
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.splits import split_seeds
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.closed_loop import run_episodes

    vla, processor = load_vla(args.vla_path)
    raw: dict[int, list[np.ndarray]] = {}

    class Logged(MetaWorldEpisode):
        """An episode that keeps MetaWorld's full observation (hand xyz first, goal xyz last) after every step."""

        def step(self, action: np.ndarray):  # noqa: ANN201 - MetaWorldEpisode.step's EpisodeStep
            out = super().step(action)
            raw.setdefault(self.seed, []).append(self.env.env._get_obs().copy())
            return out

    seeds = split_seeds("validation", args.episodes, splits=METAWORLD_SPLITS)
    outcomes = run_episodes(vla, processor, seeds, "metaworld_mt10", batch_size=len(seeds),
                            make_env=lambda seed: Logged(args.task, seed))
    goals, finals = [], []
    for o in outcomes:
        obs = np.stack(raw[o.seed])
        hand, goal = obs[:, :3], obs[-1, -3:]
        dist = np.linalg.norm(hand - goal, axis=1)
        goals.append(goal)
        finals.append(hand[-1])
        print(f"seed {o.seed} {o.outcome:8s} {o.steps:4d} steps  goal {np.round(goal, 3)}  hand {np.round(hand[0], 3)}"
              f" -> {np.round(hand[-1], 3)}  closest {dist.min():.3f} m, last {dist[-1]:.3f} m")
    goals_a, finals_a = np.stack(goals), np.stack(finals)
    for axis, name in ((0, "x"), (1, "y")):
        r = np.corrcoef(goals_a[:, axis], finals_a[:, axis])[0, 1]
        print(f"goal {name} vs final hand {name}: correlation {r:+.2f} over {len(outcomes)} episodes "
              f"(goal spread {goals_a[:, axis].std():.3f} m, hand spread {finals_a[:, axis].std():.3f} m)")


if __name__ == "__main__":
    sys.exit(main())
