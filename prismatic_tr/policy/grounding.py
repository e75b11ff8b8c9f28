"""A training-only grounding loss for the policy recipe: the named colour's token must find its object.

The policy reads the instruction after the image (OpenVLA's layout: ``[BOS, patches, text]``, causal), so to act
on "pick up the red block" the action positions need two hops: some text position must gather where the red
object is from the patches, and the action positions must read it from there. Trained on the action loss
alone, the policy of task version 2 learned to find and grasp a lone object (25 / 25 one-object scenes) but not
which of several to take (``benchmarks/results/policy_training``): neither hop gets a useful gradient before the
other works.

This loss supervises the first hop directly. A linear head on the hidden state of the instruction's colour word
(e.g. ``red``), after the middle layer of the language model, predicts the demonstration's normalised
``(dx, dy)``, the expert's move toward the named object. The head is dropped after training; the checkpoint is an
ordinary OpenVLA checkpoint and acts from the action tokens alone.

    aux = GroundingLoss(vla, processor.tokenizer, action_tokenizer, weight=1.0)
    session.optimizer.add_param_group({"params": list(aux.parameters())})
    run(session, aux_loss=aux)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.envs.spec import COLORS
from prismatic_tr.models import ActionTokenizer
from prismatic_tr.training.metrics import decode_to_centers


def color_word_ids(tokenizer: Any) -> list[int]:
    """The ids of the task's colour words as they follow a space (``" red"``); ValueError unless each is one
    token (the policy recipe's tokenizer, ``build_processor(config, task_words=True)``)."""
    ids = []
    for color in COLORS:
        pieces = tokenizer(f"the {color}", add_special_tokens=False)["input_ids"]
        alone = tokenizer("the", add_special_tokens=False)["input_ids"]
        if len(pieces) != len(alone) + 1:
            raise ValueError(f"the tokenizer splits the colour word {color!r} into several tokens; the grounding "
                             "loss needs the policy recipe's tokenizer (build_processor(config, task_words=True))")
        ids.append(int(pieces[-1]))
    return ids


class GroundingLoss(nn.Module):
    """``loss(out, batch)``: mean squared error of a linear head on the colour word's hidden state against the
    first two action dimensions of the batch's labels, times ``weight``.

    out.hidden_states: tuple of (B, L + K, D) (embeddings, then each layer); batch["input_ids"], ["labels"]:
    (B, L); K visual tokens follow BOS, so text position j >= 1 is position j + K of the hidden states. Rows
    without a colour word do not count.
    """

    def __init__(self, hidden_size: int, word_ids: list[int], action_tokenizer: ActionTokenizer,
                 weight: float = 1.0, layer_fraction: float = 0.5) -> None:
        super().__init__()
        if not weight > 0:
            raise ValueError(f"weight={weight!r} is not allowed; use a number > 0")
        if not 0.0 < layer_fraction <= 1.0:
            raise ValueError(f"layer_fraction={layer_fraction!r} is not allowed; use a number in (0, 1]")
        self.head = nn.Linear(hidden_size, 2)
        self.register_buffer("word_ids", torch.tensor(word_ids, dtype=torch.long), persistent=False)
        self.action_tokenizer, self.weight, self.layer_fraction = action_tokenizer, float(weight), layer_fraction

    def forward(self, out: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = out.hidden_states
        states = hidden[max(1, round(self.layer_fraction * (len(hidden) - 1)))]     # (B, L + K, D)
        ids, labels = batch["input_ids"], batch["labels"]                          # (B, L)
        k = out.projector_features.shape[1]
        is_word = torch.isin(ids, self.word_ids)
        pos = is_word.int().argmax(1)                                              # first colour word, (B,)
        rows = torch.arange(ids.shape[0], device=ids.device)
        word_state = states[rows, pos + k].float()                                 # (B, D)
        first = (labels != -100).int().argmax(1)                                   # the dx label, (B,)
        tokens = labels.gather(1, torch.stack([first, first + 1], 1))              # dx, dy tokens (B, 2)
        target = decode_to_centers(tokens, self.action_tokenizer)                  # normalised, (B, 2)
        err = (self.head(word_state) - target).pow(2).sum(-1)
        has = is_word.any(1).float()
        return self.weight * (err * has).sum() / has.sum().clamp(min=1.0)
