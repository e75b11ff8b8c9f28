"""Offline evaluation on recorded episodes: what each reduction setting does to the actions a checkpoint
predicts for an RLDS dataset's steps (the user's own data and model, no simulator).

Per setting, over the first ``max_samples`` steps of a split (images resized by the model's processor,
instructions used as they are): ``action_l1_to_demo`` (mean |predicted - recorded| of the un-normalised
actions, over every dimension), ``action_l1_to_unreduced`` (against the unreduced model's actions on the same
steps) and ``token_agreement`` (fraction of greedy action tokens equal to the unreduced model's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.models.tokenizer import build_prompt
from prismatic_tr.policy.evaluate import llm_visual_tokens, reduction
from prismatic_tr.vla import visual_token_count
from prismatic_tr.vla.spec import Setting


def read_steps(data_root_dir: str, dataset_name: str, split: str, max_samples: int) -> list[dict[str, Any]]:
    """The first ``max_samples`` steps of the split as {"image" uint8 (H, W, 3), "instruction" str, "action"}.

    ValueError (from :class:`prismatic_tr.data.rlds.RLDSSource`) for a missing dataset, split or step keys.
    """
    from prismatic_tr.data.rlds import RLDSSource

    source = RLDSSource(data_root_dir, dataset_name, split)
    steps = []
    for step in source.decode(source.step_dataset()).take(max_samples).as_numpy_iterator():
        text = step["instruction"]
        steps.append({"image": np.asarray(step["image"], dtype=np.uint8),
                      "instruction": text.decode() if isinstance(text, bytes) else str(text),
                      "action": np.asarray(step["action"], dtype=np.float64)})
    if not steps:
        raise ValueError(f"split {split!r} of {dataset_name!r} has no steps")
    return steps


def expert_steps(seeds: Sequence[int], max_steps_per_episode: int | None = None) -> list[dict[str, Any]]:
    """Steps of the scripted expert in the tabletop task (no dataset needed): what :func:`read_steps` returns."""
    from prismatic_tr.envs import ScriptedExpert, make_episode, rollout

    steps = []
    for seed in seeds:
        env = make_episode(int(seed))
        result = rollout(env, ScriptedExpert().policy(env), record=True)
        for image, action in list(zip(result.images, result.actions, strict=True))[:max_steps_per_episode]:
            steps.append({"image": image, "instruction": result.instruction, "action": np.asarray(action, np.float64)})
    return steps


def _batches(steps: Sequence[dict[str, Any]], size: int) -> Iterator[Sequence[dict[str, Any]]]:
    for i in range(0, len(steps), size):
        yield steps[i : i + size]


@torch.no_grad()
def predict(vla: nn.Module, processor: Any, steps: Sequence[dict[str, Any]], unnorm_key: str,
            batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy action tokens (S, A) and un-normalised actions (S, A) of ``vla`` as it is (reduction attached
    or not), as ``predict_action`` makes them."""
    dim = vla.get_action_dim(unnorm_key)
    tokens = []
    for batch in _batches(steps, batch_size):
        inputs = processor([build_prompt(s["instruction"]) for s in batch], [s["image"] for s in batch])
        prompt = vla.make_prompt(inputs["input_ids"], inputs["attention_mask"], for_actions=True)
        tokens.append(vla.generate_from_prompt(prompt, inputs["pixel_values"], max_new_tokens=dim).cpu().numpy())
    ids = np.concatenate(tokens)
    return ids, np.asarray(vla.actions_from_tokens(ids, unnorm_key), dtype=np.float64)


def evaluate_offline(
    vla: nn.Module,
    processor: Any,
    settings: Sequence[Setting],
    steps: Sequence[dict[str, Any]],
    unnorm_key: str,
    batch_size: int = 16,
    on_setting: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One record per setting (baseline first): the columns of the module docstring plus the token counts."""
    if not settings or not settings[0].is_baseline:
        raise ValueError("settings must start with the unreduced baseline ('none')")
    demo = np.stack([s["action"] for s in steps])
    if demo.shape[1] != vla.get_action_dim(unnorm_key):
        raise ValueError(f"the dataset's actions have {demo.shape[1]} dimensions but the model's statistics for "
                         f"{unnorm_key!r} have {vla.get_action_dim(unnorm_key)}")
    records, base_ids, base_actions = [], None, None
    for s in settings:
        with reduction(vla, s):
            tokens = visual_token_count(vla)
            ids, actions = predict(vla, processor, steps, unnorm_key, batch_size)
        if base_ids is None:
            base_ids, base_actions = ids, actions
        first = s.parts[0] if s.parts else s
        records.append({
            "method": s.family, "setting": s.label, "site": "+".join(p.site for p in s.parts) or "none",
            "reduction_ratio": first.keep_ratio, "depth_fraction": first.depth_fraction,
            "num_patches": tokens, "llm_visual_tokens": llm_visual_tokens(s, tokens),
            "action_l1_to_demo": float(np.abs(actions - demo).mean()),
            "action_l1_to_unreduced": float(np.abs(actions - base_actions).mean()),
            "token_agreement": float((ids == base_ids).mean()), "samples": len(steps),
        })
        if on_setting is not None:
            on_setting(s.label)
    return records
