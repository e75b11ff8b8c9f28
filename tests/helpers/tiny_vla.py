"""The tiny native OpenVLA the site tests share (built once per backbone), its inputs, and a snapshot of everything a
removed reduction must leave as it was (outputs, state dict, backbone class and attributes, config)."""

from __future__ import annotations

import functools

import torch

from prismatic_tr.models import NativeOpenVLA, build_vla


@functools.cache
def tiny(backbone: str = "dinosiglip-vit-so-224px") -> NativeOpenVLA:
    return build_vla("tiny", backbone, seed=0)


def make_inputs(vla: NativeOpenVLA, batch: int = 2, length: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vla.vocab_size - 256, (batch, length), generator=gen)
    ids[:, 0] = 1
    channels = 6 if vla.vision_backbone.use_fused_vision_backbone else 3
    return {"input_ids": ids, "pixel_values": torch.randn(batch, channels, 224, 224, generator=gen)}


def snapshot(vla: NativeOpenVLA) -> tuple:
    inp = make_inputs(vla)
    with torch.no_grad():
        out = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3, return_logits=True)
    return (out.logits, dict(vla.state_dict()), type(vla.vision_backbone), dict(vars(vla.vision_backbone)).keys(),
            getattr(vla.config, "token_reduction", "unset"))


def assert_same(before: tuple, after: tuple) -> None:
    assert torch.equal(before[0], after[0])
    assert before[1].keys() == after[1].keys() and all(torch.equal(before[1][k], after[1][k]) for k in before[1])
    assert before[2:] == after[2:]
