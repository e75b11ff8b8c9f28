"""Self-attention of a timm ``Attention`` module recomputed from its own submodules.

The patched blocks need the queries and keys (TopK: one query row; ToMe: keys averaged over heads),
an additive bias (proportional attention: log token size) or the attention probabilities (hquota_ff).
``attention_forward`` calls the module's ``qkv``, ``q_norm``, ``k_norm``, ``norm`` (timm >= 1.0),
``gate`` (timm >= 1.0), ``attn_drop``, ``proj`` and ``proj_drop`` in the order timm 0.9.10 and 1.0.31
do, so with no bias and no probabilities requested the output is bit-identical to ``attn(x)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["AttentionResult", "attention_forward", "check_attention_module"]

_REQUIRED = ("qkv", "num_heads", "head_dim", "scale", "attn_drop", "proj", "proj_drop")


@dataclass
class AttentionResult:
    """out (B, N, C_out); q, k (B, H, N, d) after q_norm/k_norm; probs (B, H, N, N) or None."""

    out: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    probs: torch.Tensor | None


def check_attention_module(attn: nn.Module) -> None:
    """Raise ValueError unless ``attn`` looks like timm's fused-qkv ``Attention``."""
    missing = [name for name in _REQUIRED if not hasattr(attn, name)]
    if missing or not isinstance(getattr(attn, "qkv", None), nn.Linear):
        raise ValueError(
            f"unsupported attention module {type(attn).__name__} (missing {missing or ['qkv Linear']}); "
            "supported: timm vision_transformer.Attention with a fused qkv projection"
        )


def _mix(attn: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
         need_probs: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention mixing (B, H, N, d) -> (B, H, N, d); bias (B, 1, 1, N) additive or None."""
    if getattr(attn, "fused_attn", False) and not need_probs:
        mask = None if bias is None else bias.to(q.dtype)
        dropout_p = attn.attn_drop.p if attn.training else 0.0
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p), None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    scores = (q * attn.scale) @ k.transpose(-2, -1)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    probs = scores.softmax(dim=-1)
    return attn.attn_drop(probs) @ v, (probs if need_probs else None)


# follows timm 0.9.10 / 1.0.31 timm/models/vision_transformer.py Attention.forward (Apache-2.0, see NOTICE):
# the same submodule calls in the same order, so the output equals attn(x) bit for bit.
def attention_forward(
    attn: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None, need_probs: bool = False
) -> AttentionResult:
    """Run timm attention on x (B, N, C) with an optional additive key bias (B, 1, 1, N).

    With ``need_probs`` the unfused path is taken and the softmax probabilities (B, H, N, N), before
    dropout, are returned as well; otherwise the module's own ``fused_attn`` choice is kept.
    """
    B, N, _ = x.shape
    gate_layer = getattr(attn, "gate", None)
    gate = gate_layer(x).sigmoid() if gate_layer is not None else None
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    mixed, probs = _mix(attn, q, k, v, bias, need_probs)
    out = mixed.transpose(1, 2).reshape(B, N, attn.num_heads * attn.head_dim)
    norm = getattr(attn, "norm", None)
    if norm is not None:
        out = norm(out)
    if gate is not None:
        out = out * gate
    out = attn.proj_drop(attn.proj(out))
    return AttentionResult(out=out, q=q, k=k, probs=probs)
