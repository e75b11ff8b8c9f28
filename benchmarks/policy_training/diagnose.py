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
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from prismatic_tr.data import ActionPromptTransform, PaddedCollator
from prismatic_tr.data.rlds import RLDSSource
from prismatic_tr.envs import TaskConfig
from prismatic_tr.envs.splits import VALIDATION, split_seeds
from prismatic_tr.models import load_vla
from prismatic_tr.policy.closed_loop import SuccessSummary, run_episodes
from prismatic_tr.policy.train import DATASET
from prismatic_tr.training.loop import vla_info
from prismatic_tr.training.model import prompt_suffix_ids

TOKENS = ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper", "stop"]


@torch.no_grad()
def token_accuracy(vla: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """Teacher-forced argmax accuracy of each action token (and the stop token) over the batch."""
    out = vla(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
              pixel_values=batch["pixel_values"], labels=batch["labels"])
    k = out.projector_features.shape[1]
    pred, target = out.logits[:, k:-1].argmax(-1), batch["labels"][:, 1:]
    scored = target != -100
    index = scored.long().cumsum(1)
    return {name: float((pred == target)[(index == i + 1) & scored].float().mean()) for i, name in enumerate(TOKENS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("data_root", type=Path)
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    vla, processor = load_vla(args.checkpoint)
    vla.eval()
    stats = json.loads((args.checkpoint / "dataset_statistics.json").read_text())[DATASET]["action"]
    vocab, n_bins, pad = vla_info(vla, processor)
    transform = ActionPromptTransform(processor, vocab, processor.tokenizer.eos_token_id, stats, n_bins=n_bins,
                                      prompt_suffix_ids=prompt_suffix_ids(vla))
    source = RLDSSource(args.data_root, DATASET)
    steps = source.decode(source.step_dataset(shard=(0, 1)).shuffle(50_000, seed=1)).take(args.examples)
    batch = PaddedCollator(pad)([transform(s) for s in steps.as_numpy_iterator()])
    shuffled = {**batch, "pixel_values": batch["pixel_values"][torch.randperm(len(batch["pixel_values"]))]}
    blank = {**batch, "pixel_values": torch.zeros_like(batch["pixel_values"])}
    report: dict[str, object] = {"token_accuracy": {
        "own_images": token_accuracy(vla, batch), "shuffled_images": token_accuracy(vla, shuffled),
        "blank_images": token_accuracy(vla, blank)}}
    seeds = list(split_seeds(VALIDATION, args.episodes))  # diagnoses guide decisions: never the test split
    for name, config in (("one_object", TaskConfig(1, 1)), ("task_3_to_5_objects", None)):
        outcomes = run_episodes(vla, processor, seeds, DATASET, config=config, batch_size=25)
        summary = SuccessSummary.of(outcomes)
        report[name] = {"success_rate": summary.success_rate, "ci": [summary.success_ci_low, summary.success_ci_high],
                        "episodes": summary.episodes, "outcomes": dict(Counter(o.outcome for o in outcomes))}
    print(json.dumps(report, indent=1, default=lambda x: float(np.round(x, 3))))


if __name__ == "__main__":
    main()
