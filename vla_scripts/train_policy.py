"""Train the tabletop policy on the CPU: expert demonstrations, a random OpenVLA-structured model (preset
``policy``: DINOv2 + SigLIP towers 64 wide and 6 deep, 256 patch tokens, a Llama 128 wide and 4 deep, 256
action bins), optional tower pretraining, fine-tuning with the package's trainer (optionally with frozen towers
and the grounding loss), closed-loop evaluation on unseen episodes.

    python vla_scripts/train_policy.py --num_episodes 3000 --vision_pretrain_steps 1000 --freeze_vision true
    python vla_scripts/train_policy.py --init_checkpoint CKPT --data_root D --grounding_loss_weight 1.0 \
        --install_dir prismatic_tr/assets/tabletop_policy

The bundled policy (``prismatic_tr/assets/tabletop_policy``) was made by two such commands, given with their
seeds, data and curves in ``benchmarks/results/policy_training/README.md``.

Writes ``<output_dir>/{data,init,runs}``, ``training_curve.csv`` and ``evaluation.json`` (success on unseen
seeds with its Wilson 95 % interval, minutes per stage). Bad flags exit with status 2 before any work.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.policy.train import PolicyTrainConfig, run_recipe
from vla_scripts.cli import parse_config_or_exit

PROG = "train_policy.py"


def parse_config(args: Sequence[str] | None = None) -> PolicyTrainConfig:
    """Parse flags; on a bad value print ``train_policy.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(PolicyTrainConfig, args, PROG, description=__doc__)


def main(cfg: PolicyTrainConfig) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)
    record = run_recipe(cfg)
    ev = record["evaluation"]
    print(f"closed-loop success on {ev['episodes']} unseen episodes: {ev['success_rate']:.1%} "
          f"(95 % CI {ev['success_ci_low']:.1%} - {ev['success_ci_high']:.1%}), mean {ev['mean_steps']:.1f} steps")
    print("minutes: " + ", ".join(f"{k} {v:.1f}" for k, v in record["minutes"].items()))
    print(f"checkpoint: {record['checkpoint']}", file=sys.stdout)
    return record


if __name__ == "__main__":
    main(parse_config())
