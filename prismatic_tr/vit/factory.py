"""``create_model``: timm names with a token-reduction method prefix."""

from __future__ import annotations

from typing import Any

import timm
from torch import nn

from prismatic_tr.vit.config import METHODS
from prismatic_tr.vit.patch import apply_vit_reduction

__all__ = ["create_model", "split_method"]

_REDUCTION_KWARGS = ("keep_ratio", "r", "reduction_loc", "hub_fraction", "prop_attn")


def split_method(name: str) -> tuple[str | None, str]:
    """"topk_deit_base_patch16_224" -> ("topk", "deit_base_patch16_224"); no prefix -> (None, name)."""
    for method in sorted(METHODS, key=len, reverse=True):  # "hquota_ff_" before shorter prefixes
        if name.startswith(method + "_"):
            return method, name[len(method) + 1:]
    return None, name


def create_model(name: str, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """Build a timm model, with token reduction attached when ``name`` has a method prefix.

    ``create_model("topk_deit_base_patch16_224", keep_ratio=0.1, reduction_loc=[3, 6, 9])``;
    reduction kwargs (keep_ratio, r, reduction_loc, hub_fraction, prop_attn) go to ``apply_vit_reduction``,
    everything else to ``timm.create_model``. The handle is ``model.token_reduction_handle`` (also
    ``get_vit_reduction(model)``); it is not a submodule, so ``state_dict`` keys equal timm's.
    A name without prefix gives the plain timm model (reduction kwargs then raise ValueError).
    """
    method, timm_name = split_method(name)
    red = {k: kwargs.pop(k) for k in _REDUCTION_KWARGS if k in kwargs}
    if method is None and red:
        raise ValueError(f"{sorted(red)} given for {name!r}, which has no method prefix; prefixes: "
                         + ", ".join(m + "_" for m in METHODS))
    if not timm.is_model(timm_name):
        raise ValueError(f"unknown timm model {timm_name!r} (from {name!r})")
    model = timm.create_model(timm_name, pretrained=pretrained, **kwargs)
    if method is not None:
        apply_vit_reduction(model, method, **red)
    return model
