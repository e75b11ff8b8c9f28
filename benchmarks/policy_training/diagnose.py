"""Where a trained tabletop policy fails. Run from the repository root:

    python benchmarks/policy_training/diagnose.py CHECKPOINT DATA_ROOT [--examples 64] [--episodes 50]

Prints, as JSON:
- teacher-forced accuracy of each action token (dx, dy, dz, droll, dpitch, dyaw, gripper, stop) on
  ``--examples`` demonstration steps, with their own images, with the images shuffled across the batch, and
  with blank (zero) pixel values: how much of each token the policy reads from the image;
- closed-loop success on the first ``--episodes`` seeds of the validation split, as one-object scenes (nothing
  to ground: finding the object and stopping on it is all) and as the task's 3-5 object scenes, with the
  outcome counts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from prismatic_tr.policy.diagnosis import diagnose


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("data_root", type=Path)
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=50)
    args = parser.parse_args()
    report = diagnose(args.checkpoint, args.data_root, args.examples, args.episodes)
    print(json.dumps(report, indent=1, default=lambda x: float(np.round(x, 3))))


if __name__ == "__main__":
    main()
