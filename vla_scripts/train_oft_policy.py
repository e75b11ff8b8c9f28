"""Train the OpenVLA-OFT-style tabletop policy on the CPU, from the demonstration split, in one command:

    python vla_scripts/train_oft_policy.py --output_dir outputs/oft_policy

With its defaults (``prismatic_tr.policy.oft_recipe``):

1. 2000 expert demonstrations (seeds 0-1999, 1-5 objects, motion noise 0.2) with the third-person and the
   eye-in-hand camera and the state, as RLDS in OFT's LIBERO layout;
2. an OFT model made from the bundled tabletop policy (OFT fine-tunes a trained OpenVLA): its towers, projector and
   Llama, a new proprio projector (4-D state: effector x, y, z, gripper) and L1-regression head; 2 images, a chunk
   of 8 x 7 actions, causal attention over the one pass;
3. AdamW on the L1 loss of the normalised chunk, towers frozen, lr 5e-4, 100 warm-up steps, cosine over 1500
   steps, batch 16, seed 0, a checkpoint every 250 steps;
4. the policy: the checkpoint with the most successes on 50 validation episodes;
5. its closed-loop success on 200 validation and 200 test episodes, each chunk executed open loop (OFT's rule);
6. with ``--install_dir`` a copy of the checkpoint and every record there.

Bad flags, and seeds that leave their split, exit with status 2 before any work.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.cli import parse_config_or_exit, run_command
from prismatic_tr.policy.oft_recipe import OFTPolicyTrainConfig, run_recipe
from prismatic_tr.policy.train import run_and_report, summary_lines

PROG = "train_oft_policy.py"


def parse_config(args: Sequence[str] | None = None) -> OFTPolicyTrainConfig:
    """Parse flags; on a bad value print ``train_oft_policy.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(OFTPolicyTrainConfig, args, PROG, description=__doc__)


def main(cfg: OFTPolicyTrainConfig) -> dict:
    return run_and_report(run_recipe, summary_lines, cfg)


def cli(argv: Sequence[str] | None = None) -> int:
    """The command: parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
