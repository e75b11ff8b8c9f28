"""LoRA fine-tuning of an OpenVLA-style model on an RLDS dataset, optionally with visual token reduction.

    python vla_scripts/finetune.py --vla_path <checkpoint dir> --data_root_dir <dir> --dataset_name <name> \\
        --token_reduction.method topk_magnitude --token_reduction.keep_ratio 0.5
    python vla_scripts/finetune.py ... --token_reduction.site vision --token_reduction.depth_fraction 0.25 \\
        --token_reduction.keep_ratio 0.25                  # inside the towers (the site's default method)
    python vla_scripts/finetune.py ... --distill_weight 1.0    # + KL to the unreduced vla_path at the action tokens
    torchrun --standalone --nproc_per_node 2 vla_scripts/finetune.py ...      # DDP (gloo on CPU, nccl on GPU)
    python vla_scripts/finetune.py --vla_path prismatic_tr/assets/tabletop_oft_policy --data_root_dir <dir> \
        --dataset_name tabletop_pick_oft --token_reduction.spec vision:diverse:0.1@0.25 --distill_weight 1.0

An OpenVLA-OFT checkpoint as ``--vla_path`` trains as OFT's ``finetune.py`` does (``prismatic_tr.training.oft``): every
step with its action chunk, all the policy's cameras and the state, the L1 loss on the normalised chunk through the
one parallel pass (the reduction attached), LoRA on the towers, projector and Llama with the action head and proprio
projector trained whole (or ``--use_lora false``: everything), distillation on the unreduced policy's chunk.

Every check (arguments, dataset directory / split / keys, vla_path, batch size, quantization) runs before
training; a failure prints ``finetune.py: error: <reason>`` and exits with status 2. Checkpoints go to
``<run_root_dir>/<exp_id>/checkpoints/{latest|step_N}``; load one with ``prismatic_tr.models.load_vla`` and
re-apply its reduction (site, method, depth, positions) with ``prismatic_tr.vla.apply_token_reduction_from_config``.
``--token_reduction.site llm`` is refused: that site prunes generation prefills only, so it would train unreduced.
A ``--vla_path`` that carries a learned scorer (``--token_reduction.method learned`` at the same depth) trains on from
it; at another depth the run is refused.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.cli import parse_config, report_bad_input
from prismatic_tr.training import FinetuneConfig, finetune

PROG = "finetune.py"


def parse(argv: Sequence[str] | None) -> FinetuneConfig:
    """Parse the command line into a validated FinetuneConfig (ValueError on bad values)."""
    return parse_config(FinetuneConfig, argv, prog=PROG, description=__doc__)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, validate and train; returns the exit status (0 ok, 2 bad input)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        cfg = parse(argv)
        result = finetune(cfg)
    except ValueError as err:
        return report_bad_input(PROG, err)
    if result.last_checkpoint is not None:
        print(f"checkpoint: {result.last_checkpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
