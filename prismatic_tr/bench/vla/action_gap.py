"""How far a reduction moves an OpenVLA-OFT policy's action chunk, on recorded states: a quick screen before
closed-loop episodes.

Closed-loop success on MetaWorld takes thousands of episodes to rank two settings a point or two apart; the gap
between the chunk the policy predicts reduced and the one it predicts unreduced, on the same recorded observations,
takes seconds a setting and ranks large differences the same way (issue 48: on the shipped MetaWorld policy the
settings whose test success is lower have the larger gap, with exceptions, so it screens and never chooses). The
states are an on-policy dataset's (:mod:`prismatic_tr.policy.metaworld_onpolicy`: a reduced policy drives, so they are
the states a reduced policy reaches), read with the OFT training pipeline's transform (:mod:`prismatic_tr.data.oft`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prismatic_tr.vla.spec import Setting


@dataclass(frozen=True)
class RecordedStates:
    """Recorded states as collated OFT batches, and each state's instruction (one per state, in batch order: on
    MetaWorld one instruction a task, so it names the state's task)."""

    batches: list[dict[str, torch.Tensor]]
    instructions: list[str]


def recorded_batches(data_root: Path, dataset: str, processor: Any, stats: dict[str, Any], states: int, every: int,
                     batch_size: int = 16) -> RecordedStates:
    """Every ``every``-th step of ``<data_root>/<dataset>``'s train split, up to ``states`` of them, as collated OFT
    batches (:class:`~prismatic_tr.data.oft.OFTCollator`: pixel_values (B, 2 * C, H, W), input_ids, attention_mask,
    proprio (B, P), actions (B, chunk, A) normalised as the policy trains) with their instructions. ValueError for
    ``states`` or ``every`` below 1 or a dataset with no steps."""
    from prismatic_tr.data.oft import OFTChunkSource, OFTChunkTransform, OFTCollator

    if states < 1 or every < 1:
        raise ValueError(f"states={states}, every={every}; both must be >= 1")
    source = OFTChunkSource(data_root, dataset, "train", chunk=8, num_images=2)
    transform = OFTChunkTransform(processor, stats)
    steps, instructions = [], []
    for i, step in enumerate(source.decode(source.step_dataset()).as_numpy_iterator()):
        if i % every == 0:
            steps.append(transform(step))
            text = step["instruction"]
            instructions.append(text.decode("utf-8") if isinstance(text, bytes) else str(text))
        if len(steps) >= states:
            break
    if not steps:
        raise ValueError(f"{data_root / dataset} has no steps in its train split")
    collate = OFTCollator(processor.tokenizer.pad_token_id)
    return RecordedStates([collate(steps[i:i + batch_size]) for i in range(0, len(steps), batch_size)], instructions)


@torch.no_grad()
def action_gaps(vla: nn.Module, batches: Sequence[dict[str, torch.Tensor]], settings: Sequence[Setting],
                on_setting: Callable[[str, dict[str, Any]], None] | None = None,
                groups: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """``{setting label: fields}`` for the unreduced policy and each of ``settings`` on the same batches:
    ``l1_to_unreduced`` (mean |chunk - unreduced chunk| over states, steps and action dimensions, normalised units),
    ``l1_to_unreduced_first`` (the chunk's first action only: the one a policy that replans every step would run)
    and ``l1_to_label`` (to the recorded label, the unreduced teacher's chunk when the states are on-policy).
    ``groups`` (one name per state, e.g. its task): ``by_group`` too, ``{name: {"l1_to_unreduced", "states"}}`` in
    first-seen order, since a mean over tasks can hide the one task a setting moves (ValueError when its length is
    not the number of states)."""
    from prismatic_tr.policy.evaluate import reduction
    from prismatic_tr.vla.spec import parse_setting

    label = torch.cat([b["actions"] for b in batches]).float()
    if groups is not None and len(groups) != label.shape[0]:
        raise ValueError(f"groups names {len(groups)} states; the batches hold {label.shape[0]}")
    member = {n: torch.tensor([g == n for g in groups]) for n in dict.fromkeys(groups)} if groups is not None else {}
    out: dict[str, dict[str, Any]] = {}
    base = None
    for setting in [parse_setting("none"), *settings]:
        with reduction(vla, setting):
            chunk = torch.cat([vla.predict_chunk(b) for b in batches]).float()
        base = chunk if base is None else base
        per_state = (chunk - base).abs().flatten(1).mean(1)  # (states,)
        fields: dict[str, Any] = {"l1_to_unreduced": (chunk - base).abs().mean().item(),
                                  "l1_to_unreduced_first": (chunk[:, 0] - base[:, 0]).abs().mean().item(),
                                  "l1_to_label": (chunk - label).abs().mean().item(), "states": int(chunk.shape[0])}
        if groups is not None:
            fields["by_group"] = {n: {"l1_to_unreduced": per_state[m].mean().item(), "states": int(m.sum())}
                                  for n, m in member.items()}
        out[setting.label] = fields
        if on_setting is not None:
            on_setting(setting.label, fields)
    return out
