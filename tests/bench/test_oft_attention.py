"""Attention shares of an OFT policy's action slots (``prismatic_tr.bench.vla.oft_attention``), on a tiny model.

The probabilities are rebuilt from the layers' q / k projections; they are right when, multiplied with the layers'
own values, they give what each layer's ``o_proj`` received from SDPA.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from prismatic_tr.bench.vla.oft_attention import layer_attention, slot_attention_shares
from prismatic_tr.models import build_oft_vla


def tiny_inputs() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 1000, (1, 9), generator=g)
    ids[0, 0] = 1
    return {"input_ids": ids, "pixel_values": torch.randn(1, 12, 224, 224, generator=g), "unnorm_key": "bridge_orig",
            "proprio": np.linspace(-1, 1, 8)}


def test_rebuilt_probabilities_give_each_layers_attention_output():
    vla = build_oft_vla("tiny", oft={"num_images_in_input": 2}, seed=1)
    cfg = vla.language_model.config
    heads, head_dim = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    seen: dict[tuple[int, str], torch.Tensor] = {}
    hooks = []
    for i, layer in enumerate(vla.language_model.model.layers):
        hooks.append(layer.self_attn.v_proj.register_forward_hook(
            lambda m, a, out, i=i: seen.__setitem__((i, "v"), out.detach())))
        hooks.append(layer.self_attn.o_proj.register_forward_pre_hook(
            lambda m, a, i=i: seen.__setitem__((i, "o"), a[0].detach())))
    probs = layer_attention(vla, tiny_inputs())
    for h in hooks:
        h.remove()
    assert len(probs) == len(vla.language_model.model.layers)
    for i, p in enumerate(probs):
        t = p.shape[-1]
        v = seen[(i, "v")].view(1, t, -1, head_dim).transpose(1, 2)[0]
        v = v.repeat_interleave(heads // v.shape[0], dim=0)
        out = (p @ v).transpose(0, 1).reshape(t, heads * head_dim)
        torch.testing.assert_close(out, seen[(i, "o")][0], rtol=1e-4, atol=1e-5)


def test_shares_add_up_and_a_blind_query_attends_evenly():
    vla = build_oft_vla("tiny", oft={"num_images_in_input": 2}, seed=1)
    for row in slot_attention_shares(vla, tiny_inputs()):
        total = row["bos"] + row["proprio"] + row["visual"] + row["prompt"] + row["slots"]
        assert total == pytest.approx(1.0, abs=1e-5)
    with torch.no_grad():
        for layer in vla.language_model.model.layers:
            layer.self_attn.q_proj.weight.zero_()
    for row in slot_attention_shares(vla, tiny_inputs()):
        assert row["proprio"] == pytest.approx(row["uniform"], rel=1e-5)
        assert row["bos"] == pytest.approx(row["uniform"], rel=1e-5)


def test_other_passes_are_refused():
    vla = build_oft_vla("tiny", oft={"num_images_in_input": 2, "attention": "bidirectional"}, seed=1)
    with pytest.raises(ValueError, match="'bidirectional'"):
        layer_attention(vla, tiny_inputs())
    causal = build_oft_vla("tiny", oft={"num_images_in_input": 2}, seed=1)
    with pytest.raises(ValueError, match="'proprio'"):
        slot_attention_shares(causal, {**tiny_inputs(), "proprio": None})
