"""Train and evaluate the OpenVLA-OFT-style MetaWorld MT10 policy on the CPU, in one command:

    METAWORLD=1 bash scripts/setup_env.sh        # the metaworld extra and OSMesa (once)
    python vla_scripts/train_metaworld_policy.py --output_dir outputs/metaworld_policy

With its defaults (``prismatic_tr.policy.metaworld_recipe``):

1. 50 scripted-expert demonstrations per MT10 task (demonstration seeds 0, 1, ...; failed expert seeds skipped), both
   cameras (``corner3``, ``gripperPOV``, 224 px) and the 7-D state, as RLDS (``--data_root`` reuses written ones);
2. an OFT model made from the bundled tabletop policy (its towers, projector and Llama), a new proprio projector and
   L1-regression head; 2 images, a chunk of 8 x 7 actions, causal attention over the one pass;
3. stage 1 (in ``<output_dir>/stage1``): AdamW on the L1 loss of the normalised chunk, towers trained too, lr 5e-4,
   100 warm-up steps, cosine over 4000 steps, batch 16, seed 0, a checkpoint every 1000 steps;
4. stage 1's policy: the checkpoint with the most successes over 10 validation episodes of each task;
5. stage 2 (``--refine.*``): that policy trained 1500 steps more (lr 2e-4, 50 warm-up steps, a checkpoint every
   500) on demonstrations of its own: 80 of reach, 120 of push, 120 of pick-place, 60 of peg-insert-side, 20 of
   each other task, and chosen again on validation; copied to ``<output_dir>/policy`` (what
   ``vla_scripts/eval_metaworld.py`` reads by default). ``--refine.max_steps 0`` stops after stage 1; a fine-tune
   (``--init_oft``, ``--setting``) has no stage 2;
6. its closed-loop success on 50 test episodes per task (held-out goals), each chunk executed open loop.

A fine-tune under a reduction (``--init_oft P --setting S``) trains on the demonstrations, or with
``--onpolicy_episodes N`` on N episodes a task that P drives with S attached, labelled by P unreduced at every chunk
it plans (``prismatic_tr.policy.metaworld_onpolicy``: self-distillation on the policy's own states).

A cut-off run resumes where it stopped (the same command again): a finished stage is not run again.
Each closed-loop evaluation runs in spawned worker processes (`--eval_workers`, 2 by default; MetaWorld's OSMesa and
tensorflow cannot share one).
Bad flags exit with status 2 before any work.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.cli import parse_config_or_exit, run_command
from prismatic_tr.policy.metaworld_recipe import MetaWorldPolicyTrainConfig, run_recipe
from prismatic_tr.policy.metaworld_records import summary_lines
from prismatic_tr.policy.train import run_and_report

PROG = "train_metaworld_policy.py"


def parse_config(args: Sequence[str] | None = None) -> MetaWorldPolicyTrainConfig:
    """Parse flags; on a bad value print ``train_metaworld_policy.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(MetaWorldPolicyTrainConfig, args, PROG, description=__doc__)


def main(cfg: MetaWorldPolicyTrainConfig) -> dict:
    return run_and_report(run_recipe, summary_lines, cfg)


def cli(argv: Sequence[str] | None = None) -> int:
    """The command: parse ``argv``, run, exit status."""
    return run_command(parse_config, main, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
