"""Where a trained tabletop policy fails (``benchmarks/policy_training/diagnose.py``): teacher-forced accuracy of
each action token with its own, shuffled and blank images (how much of each token it reads from the image), and
closed-loop success on validation seeds as one-object and as 3-5 object scenes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.data import ActionPromptTransform, PaddedCollator
from prismatic_tr.data.rlds import RLDSSource
from prismatic_tr.envs import TaskConfig
from prismatic_tr.envs.splits import VALIDATION, split_seeds
from prismatic_tr.models import load_vla
from prismatic_tr.policy.closed_loop import SuccessSummary, run_episodes
from prismatic_tr.policy.recipe_config import DATASET
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


def diagnose(checkpoint: Path, data_root: Path, examples: int, episodes: int) -> dict[str, Any]:
    """The report: token accuracy on ``examples`` demonstration steps of ``data_root`` (own, shuffled and blank
    images), and closed-loop success on the first ``episodes`` validation seeds (one object; the task's 3-5)."""
    torch.manual_seed(0)
    vla, processor = load_vla(checkpoint)
    vla.eval()
    stats = json.loads((checkpoint / "dataset_statistics.json").read_text())[DATASET]["action"]
    vocab, n_bins, pad = vla_info(vla, processor)
    transform = ActionPromptTransform(processor, vocab, processor.tokenizer.eos_token_id, stats, n_bins=n_bins,
                                      prompt_suffix_ids=prompt_suffix_ids(vla))
    source = RLDSSource(data_root, DATASET)
    steps = source.decode(source.step_dataset(shard=(0, 1)).shuffle(50_000, seed=1)).take(examples)
    batch = PaddedCollator(pad)([transform(s) for s in steps.as_numpy_iterator()])
    shuffled = {**batch, "pixel_values": batch["pixel_values"][torch.randperm(len(batch["pixel_values"]))]}
    blank = {**batch, "pixel_values": torch.zeros_like(batch["pixel_values"])}
    report: dict[str, object] = {"token_accuracy": {
        "own_images": token_accuracy(vla, batch), "shuffled_images": token_accuracy(vla, shuffled),
        "blank_images": token_accuracy(vla, blank)}}
    seeds = list(split_seeds(VALIDATION, episodes))  # diagnoses guide decisions: never the test split
    for name, config in (("one_object", TaskConfig(1, 1)), ("task_3_to_5_objects", None)):
        outcomes = run_episodes(vla, processor, seeds, DATASET, config=config, batch_size=25)
        summary = SuccessSummary.of(outcomes)
        report[name] = {"success_rate": summary.success_rate, "ci": [summary.success_ci_low, summary.success_ci_high],
                        "episodes": summary.episodes, "outcomes": dict(Counter(o.outcome for o in outcomes))}
    return report
