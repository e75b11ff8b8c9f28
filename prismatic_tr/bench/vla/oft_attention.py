"""Where an OpenVLA-OFT policy's action slots look: attention shares over one causal pass, from the layers' own
projections.

    shares = slot_attention_shares(vla, inputs)    # inputs: predict_action's keyword arguments, batch 1
    shares[0]["proprio"], shares[0]["uniform"]     # layer 0: the state token's share against a uniform one's

The pass is ``[BOS, visual, proprio, prompt, S slots, stop]`` (:mod:`prismatic_tr.models.oft_pass`); the L1 head
reads the S positions from one before the first slot. For each decoder layer the queries and keys are taken from
its ``q_proj`` / ``k_proj`` outputs (forward hooks during one ``predict_action``), rotated with Llama's rotary
embedding at the pass's positions 0 .. T - 1, and turned into causal attention probabilities, so no attention
implementation has to return its weights (SDPA does not). Used by ``benchmarks/metaworld_state_use.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def rope_theta(text_config: Any) -> float:
    """The rotary base of a Llama config on either stack (``rope_parameters`` in transformers 5, ``rope_theta``
    before)."""
    params = getattr(text_config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(text_config, "rope_theta", 10000.0)))


def rotate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """(B, H, T, d) queries or keys -> rotated at positions 0 .. T - 1 (Llama's rotary embedding: the two halves
    of each head paired, frequencies ``theta ** (-2i / d)``)."""
    t, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.arange(t, dtype=torch.float32)[:, None] * inv[None]
    angles = torch.cat([angles, angles], dim=-1)
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * angles.cos() + half * angles.sin()


def layer_attention(vla: nn.Module, inputs: dict[str, Any]) -> list[torch.Tensor]:
    """Per decoder layer, the (H, T, T) causal attention probabilities of one ``predict_action(**inputs)`` (batch
    1; the policy's attention must be "causal", and no site may drop tokens inside the pass)."""
    if vla.oft.attention != "causal":
        raise ValueError(f"attention shares are computed for causal passes; this policy's attention is "
                         f"{vla.oft.attention!r}")
    lm = vla.language_model
    cfg = lm.config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    captured: dict[tuple[int, str], torch.Tensor] = {}
    hooks = []
    for i, layer in enumerate(lm.model.layers):
        for name in ("q_proj", "k_proj"):
            def keep(module: nn.Module, args: tuple, out: torch.Tensor, key: tuple[int, str] = (i, name)) -> None:
                captured[key] = out.detach()
            hooks.append(getattr(layer.self_attn, name).register_forward_hook(keep))
    try:
        with torch.no_grad():
            vla.predict_action(**inputs)
    finally:
        for h in hooks:
            h.remove()
    theta = rope_theta(cfg)
    probs = []
    for i in range(len(lm.model.layers)):
        q, k = captured[(i, "q_proj")], captured[(i, "k_proj")]
        b, t, _ = q.shape
        if b != 1:
            raise ValueError(f"attention shares are computed for a batch of one; the inputs hold {b}")
        q = rotate(q.view(b, t, heads, head_dim).transpose(1, 2).float(), theta)
        k = rotate(k.view(b, t, kv_heads, head_dim).transpose(1, 2).float(), theta)
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        scores = (q @ k.transpose(-1, -2)) / head_dim**0.5
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        probs.append(scores.softmax(dim=-1)[0])
    return probs


def slot_attention_shares(vla: nn.Module, inputs: dict[str, Any]) -> list[dict[str, float]]:
    """Per layer: the mean (over heads and the S read positions) attention share on the proprio token, on all
    visual tokens, on the prompt (after BOS) and on the slots, and ``uniform``: the share one token would get if
    every read position attended evenly to all it sees. ``inputs`` must carry ``proprio``; the policy must have no
    reduction attached (the visual tokens are counted unreduced)."""
    if inputs.get("proprio") is None:
        raise ValueError("attention shares need a policy with a state and inputs with 'proprio'")
    visual = vla.vision_backbone.get_num_patches() * vla.vision_backbone.get_num_images_in_input()
    slots = vla.oft.num_action_slots
    rows = []
    for i, p in enumerate(layer_attention(vla, inputs)):
        t = p.shape[-1]
        first_slot = t - slots - 1
        read = p[:, first_slot - 1 : t - 2]  # (H, S, T)
        proprio = visual + 1
        rows.append({"layer": i, "bos": float(read[..., 0].mean()), "proprio": float(read[..., proprio].mean()),
                     "visual": float(read[..., 1:proprio].sum(-1).mean()),
                     "prompt": float(read[..., proprio + 1 : first_slot].sum(-1).mean()),
                     "slots": float(read[..., first_slot:].sum(-1).mean()),
                     "uniform": float((1.0 / torch.arange(first_slot, t - 1, dtype=torch.float32)).mean())})
    return rows
