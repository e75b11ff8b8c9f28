"""The policy recipe's training-only grounding loss: which token it reads, what it predicts, bad settings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from prismatic_tr.envs.spec import COLORS
from prismatic_tr.models import ActionTokenizer, build_processor, build_vla
from prismatic_tr.policy.grounding import GroundingLoss, color_word_ids


@pytest.fixture(scope="module")
def tokenizers() -> tuple:
    config = build_vla("tiny", seed=0).config
    return build_processor(config, task_words=True).tokenizer, build_processor(config).tokenizer


def test_color_word_ids_are_the_words_in_the_prompt(tokenizers) -> None:
    task, _ = tokenizers
    ids = color_word_ids(task)
    assert len(set(ids)) == len(COLORS)
    for color, i in zip(COLORS, ids, strict=True):
        prompt = task(f"In: What action should the robot take to pick up the {color} block?\nOut:")["input_ids"]
        assert prompt.count(i) == 1 and not any(prompt.count(j) for j in ids if j != i)


def test_color_word_ids_refuse_a_tokenizer_that_splits_them(tokenizers) -> None:
    _, plain = tokenizers
    with pytest.raises(ValueError, match="into several tokens"):
        color_word_ids(plain)


def test_loss_reads_the_color_word_after_the_visual_tokens() -> None:
    torch.manual_seed(0)
    at = ActionTokenizer(1000, 256)
    B, L, K, D = 3, 8, 5, 16
    word = 42
    input_ids = torch.randint(1, 30, (B, L))
    input_ids[0, 3] = word      # row 0: the colour word at text position 3
    input_ids[1, 5] = word      # row 1: at position 5
    labels = torch.full((B, L), -100)
    actions = torch.tensor([[0.4, -0.6], [-0.2, 0.8], [0.0, 0.0]])
    labels[:, 6:8] = at.encode(actions)
    states = [torch.randn(B, L + K, D) for _ in range(5)]  # embeddings + 4 layers
    out = SimpleNamespace(hidden_states=tuple(states), projector_features=torch.zeros(B, K, 4))
    loss_fn = GroundingLoss(D, [word, 43], at, weight=2.0)
    loss = loss_fn(out, {"input_ids": input_ids, "labels": labels})
    middle = states[2]  # layer_fraction 0.5 of 4 layers
    pred = loss_fn.head(torch.stack([middle[0, 3 + K], middle[1, 5 + K]]))
    target = torch.as_tensor(at.decode_token_ids_to_actions(at.encode(actions[:2])), dtype=torch.float32)
    expected = 2.0 * (pred - target).pow(2).sum(-1).mean()  # row 2 has no colour word: not counted
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert loss_fn.head.weight.grad is not None and loss_fn.head.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kwargs, match", [({"weight": 0.0}, "weight=0.0"), ({"layer_fraction": 0.0}, "layer_fraction=0.0"),
                                           ({"layer_fraction": 1.5}, "layer_fraction=1.5")])
def test_bad_settings(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GroundingLoss(8, [1], ActionTokenizer(1000, 256), **kwargs)
