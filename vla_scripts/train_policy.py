"""Remake the bundled tabletop policy on the CPU, from nothing, in one command:

    python vla_scripts/train_policy.py --output_dir outputs/bundled_policy

With its defaults (``prismatic_tr.policy.recipe_config``; ``prismatic_tr.policy.train``):

1. 3000 expert demonstrations (seeds 0-2999, 1-5 objects, motion noise 0.2) as RLDS;
2. a random OpenVLA-structured model (preset ``policy``: DINOv2 + SigLIP towers 64 wide and 6 deep, 256 patch
   tokens, a Llama 128 wide and 4 deep, 256 action bins), its towers pretrained for 1000 steps (seed 0);
3. stage 1: towers frozen, action loss plus the grounding loss (weight 1.0) from the first step, AdamW lr 1e-3,
   200 warm-up steps, cosine over 3600 steps, batch 32, seed 0, stopped after step 1800 with the schedule kept;
4. stage 2 (``--stage2.*``): from stage 1's checkpoint in a fresh state (new AdamW, seed 1), grounding loss
   weight 1.0, lr 1e-3, 50 warm-up steps, cosine over 3000 steps, stopped after step 1600, a checkpoint every 200;
5. the policy: the stage-2 checkpoint with the most successes on 50 validation episodes;
6. its closed-loop success on 200 validation and 200 test episodes (``prismatic_tr.envs.splits``: seeds
   1,000,000- and 3,000,000-), each with its Wilson 95 % interval;
7. with ``--install_dir`` a copy of the checkpoint and every record there.

bf16 autocast runs where the CPU multiplies bf16 natively (``--bf16_autocast null``, the default), else float32.
The shipped ``prismatic_tr/assets/tabletop_policy`` is runs 5 and 6 of
``benchmarks/results/policy_training/README.md`` (an earlier two-command procedure); what this command gives is
measured there too.

    python vla_scripts/train_policy.py --install_dir prismatic_tr/assets/tabletop_policy     # remake and ship
    python vla_scripts/train_policy.py --init_checkpoint CKPT --data_root D --grounding_loss_weight 1.0 \\
        --max_steps 3000 --stop_at_step 1600 --lr_warmup_steps 50 --seed 1 --stage2.enabled false   # one stage

Writes ``<output_dir>/{data,init,runs}``, ``vision_pretrain_curve.csv``, ``training_curve_stage{1,2}.csv`` and
``evaluation.json`` (settings, demonstrations, per-stage steps, minutes and checkpoints, success per seed split).
Bad flags, and seeds that leave their split, exit with status 2 before any work.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.cli import parse_config_or_exit, run_command
from prismatic_tr.policy.train import PolicyTrainConfig, run_recipe, summary_lines

PROG = "train_policy.py"


def parse_config(args: Sequence[str] | None = None) -> PolicyTrainConfig:
    """Parse flags; on a bad value print ``train_policy.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(PolicyTrainConfig, args, PROG, description=__doc__)


def main(cfg: PolicyTrainConfig) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)
    record = run_recipe(cfg)
    print(summary_lines(record))
    for stage in record["stages"]:
        print(f"{stage['stage']}: step {stage['last_step']} of a {stage['max_steps']}-step schedule -> {stage['checkpoint']}")
    return record


def cli(argv: Sequence[str] | None = None) -> int:
    """The command (``prismatic-tr-train-policy``): parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
