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

import torch  # noqa: F401  (torch first, always)

from prismatic_tr.bench.vla.metaworld_state_use import state_use
from prismatic_tr.cli import BadInputError, report_bad_input

PROG = "metaworld_state_use.py"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from prismatic_tr.envs.metaworld.tasks import MT10
    from prismatic_tr.policy.metaworld_eval import check_metaworld_command

    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--vla_path", type=Path, required=True, help="an OFT checkpoint with metaworld_mt10 statistics")
    ap.add_argument("--task", default="reach-v3", help=f"one of {list(MT10)}")
    ap.add_argument("--episodes", type=int, default=3, help="episodes driven by the expert (>= 1)")
    ap.add_argument("--split", default="validation", choices=["validation", "demonstrations"],
                    help="whose seeds: validation (unseen goals) or demonstrations (the training episodes)")
    args = ap.parse_args(argv)
    try:
        check_metaworld_command([args.task], args.episodes, 1, args.vla_path)
    except ValueError as err:
        ap.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        for line in state_use(args.vla_path, args.task, args.episodes, args.split):
            print(line)
    except BadInputError as err:  # one line, exit 2
        return report_bad_input(PROG, err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
