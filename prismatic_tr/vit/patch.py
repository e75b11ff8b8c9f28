"""Attach in-backbone token reduction to a timm ``VisionTransformer`` instance, undoably.

What changes relative to the unpatched model: each affected ``Block`` instance gets an instance-level
``forward`` (the class and its submodules are untouched, so ``state_dict`` keys never change) that
calls the block's own submodules in timm's order::

    x = x + drop_path1(ls1(attn'(norm1(x), bias=log size)))   # attn' = attention_forward(block.attn)
    x = reduce(x)                                               # only at a reduction block
    x = x + drop_path2(ls2(mlp(norm2(x))))

``attn'`` reuses the module's qkv / q_norm / k_norm / proj (see ``attention.py``) and exposes q and k.
Token sizes (float32 counts, for proportional attention) live in a per-model state reset by the first
patched block at every forward, so OpenVLA-style ``forward`` replacements (``get_intermediate_layers``) keep working.
Prefix tokens (``model.num_prefix_tokens``: CLS, registers) are never reduced and stay first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from prismatic_tr.vit.attention import AttentionResult, attention_forward, check_attention_module
from prismatic_tr.vit.config import LayerStep, VitReductionConfig, tokens_after
from prismatic_tr.vit.hquota import hquota_merge
from prismatic_tr.vit.merging import match_tokens, proportional_attention_bias, unit_sizes
from prismatic_tr.vit.topk import query_row_scores, topk_keep

__all__ = ["HANDLE_ATTR", "VitReductionHandle", "apply_vit_reduction", "get_vit_reduction"]

HANDLE_ATTR = "token_reduction_handle"
_BLOCK_PARTS = ("norm1", "attn", "ls1", "drop_path1", "norm2", "mlp", "ls2", "drop_path2")


@dataclass
class _SizeState:
    """Token sizes (B, N, 1) of the current forward, or None before the first merge."""

    size: torch.Tensor | None = None


class _ReducingForward:
    """Instance-level forward of one block (see module doc)."""

    def __init__(self, block: nn.Module, cfg: VitReductionConfig, step: LayerStep | None,
                 num_prefix: int, state: _SizeState, reset: bool) -> None:
        self.block, self.cfg, self.step = block, cfg, step
        self.num_prefix, self.state, self.reset = num_prefix, state, reset

    def _num_after(self, num_tokens: int) -> int:
        return tokens_after(num_tokens, self.num_prefix, self.cfg.method, self.step)

    # follows timm 0.9.10 / 1.0.31 timm/models/vision_transformer.py Block.forward (Apache-2.0, see NOTICE):
    # its residual order, so a block that reduces nothing gives the unpatched output bit for bit.
    def __call__(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        if attn_mask is not None or is_causal:
            raise ValueError("attn_mask / is_causal are not supported while token reduction is attached; remove() it first")
        size = self.state.size
        if self.reset or (size is not None and size.shape[:2] != x.shape[:2]):  # new forward (shapes only)
            self.state.size = None
        blk, size = self.block, self.state.size
        n_out = self._num_after(x.shape[1])
        bias = proportional_attention_bias(size) if (size is not None and self.cfg.prop_attn) else None
        need_probs = self.cfg.method == "hquota_ff" and n_out < x.shape[1]
        res = attention_forward(blk.attn, blk.norm1(x), bias=bias, need_probs=need_probs)
        x = x + blk.drop_path1(blk.ls1(res.out))
        if n_out < x.shape[1]:
            x = self._reduce(x, res, size, n_out)
        return x + blk.drop_path2(blk.ls2(blk.mlp(blk.norm2(x))))

    def _reduce(self, x: torch.Tensor, res: AttentionResult, size: torch.Tensor | None, n_out: int) -> torch.Tensor:
        """x (B, N, C) -> (B, n_out, C); updates the shared token sizes for merging methods."""
        P = self.num_prefix
        if self.cfg.method == "topk":
            return topk_keep(x, query_row_scores(res.q, res.k, self.block.attn.scale, P), n_out - P, P)[0]
        if self.cfg.method == "tome":
            matching = match_tokens(res.k.mean(dim=1), x.shape[1] - n_out, P)  # keys averaged over heads
            x, self.state.size = matching.merge_mean(x, size)
            return x
        size = size if size is not None else unit_sizes(x)
        x, self.state.size = hquota_merge(x, size, res.probs, n_out - P, P, self.cfg.hub_fraction)
        return x


class VitReductionHandle:
    """Undo handle for ``apply_vit_reduction``; also a context manager (removes on exit).

    Attributes: ``model``, ``config`` (VitReductionConfig), ``plan`` (one LayerStep | None per block),
    ``num_prefix_tokens``, ``patched_blocks`` (indices of blocks whose forward was replaced).
    """

    def __init__(self, model: nn.Module, config: VitReductionConfig, plan: list[LayerStep | None],
                 num_prefix: int, saved: dict[int, tuple[bool, object]]) -> None:
        self.model, self.config, self.plan, self.num_prefix_tokens = model, config, plan, num_prefix
        self._saved = saved
        self.patched_blocks = sorted(saved)

    @property
    def active(self) -> bool:
        return bool(self._saved)

    def remove(self) -> None:
        """Restore every patched block's forward exactly as it was; idempotent."""
        for index, (had_own, old) in self._saved.items():
            block = self.model.blocks[index]
            if not had_own:
                block.__dict__.pop("forward", None)
            else:
                block.__dict__["forward"] = old
        self._saved = {}
        if self.model.__dict__.get(HANDLE_ATTR) is self:
            del self.model.__dict__[HANDLE_ATTR]

    def token_counts(self, num_tokens: int) -> list[int]:
        """Tokens entering each block and leaving the last (length depth + 1) for ``num_tokens`` inputs."""
        counts = [num_tokens]
        for step in self.plan:
            counts.append(tokens_after(counts[-1], self.num_prefix_tokens, self.config.method, step))
        return counts

    def __enter__(self) -> VitReductionHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def get_vit_reduction(model: nn.Module) -> VitReductionHandle | None:
    """The handle attached to ``model`` by ``apply_vit_reduction`` / ``create_model``, or None."""
    return model.__dict__.get(HANDLE_ATTR)


def _check_model(model: nn.Module) -> tuple[list[nn.Module], int]:
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, (nn.Sequential, nn.ModuleList)) or len(blocks) == 0:
        raise ValueError(f"{type(model).__name__} has no `blocks` Sequential/ModuleList; expected a timm VisionTransformer")
    num_prefix = getattr(model, "num_prefix_tokens", None)
    if not isinstance(num_prefix, int) or num_prefix < 0:
        raise ValueError(f"model.num_prefix_tokens={num_prefix!r}; expected a non-negative int (timm VisionTransformer)")
    if get_vit_reduction(model) is not None:
        raise ValueError("model already has token reduction attached; call handle.remove() first")
    return list(blocks), num_prefix


def _patched_indices(cfg: VitReductionConfig, plan: list[LayerStep | None]) -> list[int]:
    steps = [i for i, s in enumerate(plan) if s is not None]
    if not steps:
        return []
    if cfg.method == "topk" or not cfg.prop_attn:
        return steps
    return list(range(steps[0], len(plan)))  # merged sizes feed proportional attention downstream


def apply_vit_reduction(
    model: nn.Module,
    method: str,
    keep_ratio: float | list[float] | None = None,
    r: int | list[int] | tuple[int, float] | None = None,
    reduction_loc: list[int] | None = None,
    hub_fraction: float = 0.5,
    prop_attn: bool = True,
) -> VitReductionHandle:
    """Attach ``method`` ("topk", "tome", "hquota_ff") to a timm ViT in place; see VitReductionConfig.

    Returns a handle (also stored as ``model.token_reduction_handle``, outside the module registry) whose
    ``remove()`` restores the original forwards; outputs are then bit-identical to before.
    Raises ValueError for bad arguments, unsupported blocks, or an r above (N - P) // 2.
    """
    blocks, num_prefix = _check_model(model)
    cfg = VitReductionConfig(method=method, keep_ratio=keep_ratio, r=r, reduction_loc=reduction_loc,
                             hub_fraction=hub_fraction, prop_attn=prop_attn)
    plan = cfg.layer_plan(len(blocks))
    num_patches = getattr(getattr(model, "patch_embed", None), "num_patches", None)
    if isinstance(num_patches, int):
        cfg.check_r_allowed(num_patches + num_prefix, num_prefix, len(blocks))
    indices = _patched_indices(cfg, plan)
    for i in indices:
        missing = [p for p in _BLOCK_PARTS if not hasattr(blocks[i], p)]
        if missing:
            raise ValueError(f"block {i} ({type(blocks[i]).__name__}) lacks {missing}; supported: timm vision_transformer.Block")
        check_attention_module(blocks[i].attn)
    state, saved = _SizeState(), {}
    for i in indices:
        saved[i] = ("forward" in blocks[i].__dict__, blocks[i].__dict__.get("forward"))
        blocks[i].__dict__["forward"] = _ReducingForward(blocks[i], cfg, plan[i], num_prefix, state, reset=i == indices[0])
    handle = VitReductionHandle(model, cfg, plan, num_prefix, saved)
    model.__dict__[HANDLE_ATTR] = handle
    return handle


