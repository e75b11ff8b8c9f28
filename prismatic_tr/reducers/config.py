"""Configuration and result types shared by every reduction strategy."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import torch

from prismatic_tr.reducers.registry import available_methods


# follows EViT (youweiliang/evit evit.py, Apache-2.0; no code taken, see NOTICE): ceil(keep_rate * patches),
# so TopK token counts equal EViT's.
def num_kept(n_patch: int, ratio: float) -> int:
    """Patch tokens kept when a fraction ``ratio`` of ``n_patch`` is kept: ``ceil(ratio * n_patch)``, clamped
    to [1, n_patch] (e.g. 0.7 of 196 -> 138, 0.7 of 256 -> 180, 0.3 of 256 -> 77).

    The package's one rounding rule for "how many tokens are kept", used by ``reducers/``, ``vit/`` (TopK, and
    the merge count of tome / hquota_ff) and ``llm/``, each with its ``keep_ratio``.
    Rounding up never keeps less than the fraction asked for, and it is EViT's published keep-rate rule
    (EViT's ``ceil(keep_rate * patches)``: DeiT-S at 0.7 on blocks 3/6/9 goes 196 -> 138 -> 97 -> 68 patches), so the
    in-backbone TopK counts equal EViT's. A 1e-6 guard absorbs float noise (0.1 * 90 = 9.000000000000002 -> 9).
    """
    return max(1, min(n_patch, math.ceil(ratio * n_patch - 1e-6)))


def check_fraction(name: str, value: Any, closed_high: bool = True, what: str = "the fraction kept") -> float:
    """``value`` as a float when it is a number in (0, 1] (``closed_high``) or (0, 1); else ``ValueError`` naming
    ``name``, the bad value and what is allowed. The one check behind every keep ratio and depth fraction."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and 0.0 < float(value) and (
        float(value) <= 1.0 if closed_high else float(value) < 1.0)
    if not ok:
        interval = "(0, 1]" if closed_high else "(0, 1)"
        raise ValueError(f"{name}={value!r} is not allowed; it is {what}, in {interval}")
    return float(value)


def infer_grid(n_patch: int) -> tuple[int, int]:
    """Square grid ``(side, side)`` for ``n_patch`` tokens; ``ValueError`` if ``n_patch`` is not a square."""
    side = math.isqrt(n_patch)
    if side * side != n_patch:
        raise ValueError(
            f"cannot infer a square patch grid from {n_patch} patch tokens; pass grid_size=(rows, cols) "
            f"with rows * cols == {n_patch}"
        )
    return side, side


POOL_POSITIONS = ("mean", "first")


class ReductionOutput(NamedTuple):
    """What a reducer returns.

    tokens:  (B, P + K, D) prefix tokens first (unchanged), then the K reduced patch tokens.
    indices: (B, K) int64 patch indices (0-based among the patch tokens, ascending) of the kept tokens;
             for ``spatial_pool`` the index of each window's top-left patch.
    positions: (B, K) float32 position of each output token among the input patches when it stands for several
             (``spatial_pool``: see ``pool_position``), None when every output token is one input patch
             (``indices`` are then the positions).
    sizes:   (B, K) float32 how many input patches each output token stands for, when the strategy merges them
             into it (``diverse_merge``): the language model weighs such a token that many times in attention
             (proportional attention, :mod:`prismatic_tr.llm.sizes`); None when each output token counts as one.
    """

    tokens: torch.Tensor
    indices: torch.Tensor
    positions: torch.Tensor | None = None
    sizes: torch.Tensor | None = None


@dataclass
class ReducerConfig:
    """Settings of a :class:`~prismatic_tr.reducers.TokenReducer`.

    Attributes:
        method: strategy name, one of :func:`~prismatic_tr.reducers.available_methods`.
        keep_ratio: fraction of patch tokens KEPT, in (0, 1]; K = num_kept(N_patch, ratio), i.e.
            max(1, ceil(ratio * N_patch)).
            ``spatial_pool`` ignores it: its kept fraction is 1 / spatial_merge_size**2.
        spatial_merge_size: window and stride of ``spatial_pool`` (>= 1).
        num_prefix_tokens: leading tokens (CLS, registers) that are never reduced and stay first (>= 0).
        grid_size: (rows, cols) of the patch grid for ``spatial_pool``; inferred from N (square) when None.
        pad: ``spatial_pool`` only: allow a grid the window does not divide (edge windows average fewer patches).
        seed: seed of the ``random`` strategy.
        pool_position: ``spatial_pool`` only: the sequence position a pooled token stands at, among the input
            patches in row-major order: ``"mean"`` (the mean index of the patches it averages, e.g. top-left
            index + 8.5 for a 2 x 2 window on a 16-wide grid) or ``"first"`` (its top-left patch's index).
    """

    method: str = "topk_magnitude"
    keep_ratio: float = 0.5
    spatial_merge_size: int = 2
    num_prefix_tokens: int = 0
    grid_size: tuple[int, int] | None = None
    pad: bool = False
    seed: int = 0
    pool_position: str = "mean"

    def __post_init__(self) -> None:
        if self.method not in available_methods():
            raise ValueError(f"unknown reduction method {self.method!r}; allowed: {', '.join(available_methods())}")
        self.keep_ratio = check_fraction("keep_ratio", self.keep_ratio)
        if self.pool_position not in POOL_POSITIONS:
            raise ValueError(f"pool_position={self.pool_position!r} is not allowed; use one of {POOL_POSITIONS}")
        if isinstance(self.spatial_merge_size, bool) or not isinstance(self.spatial_merge_size, int) \
                or self.spatial_merge_size < 1:
            raise ValueError(f"spatial_merge_size={self.spatial_merge_size!r} is not allowed; use an integer >= 1")
        if not isinstance(self.num_prefix_tokens, int) or self.num_prefix_tokens < 0:
            raise ValueError(f"num_prefix_tokens={self.num_prefix_tokens!r} is not allowed; use an integer >= 0")
        if self.grid_size is not None:
            self.grid_size = _check_grid(self.grid_size)
            if self.method == "spatial_pool":
                check_grid_fits(self.grid_size, self.spatial_merge_size, self.pad)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (grid as a list)."""
        d = asdict(self)
        d["grid_size"] = list(self.grid_size) if self.grid_size is not None else None
        return d


def _check_grid(grid: Any) -> tuple[int, int]:
    try:
        rows, cols = (int(v) for v in grid)
    except (TypeError, ValueError):
        raise ValueError(f"grid_size={grid!r} is not allowed; use (rows, cols) with positive integers") from None
    if rows < 1 or cols < 1:
        raise ValueError(f"grid_size={grid!r} is not allowed; use (rows, cols) with positive integers")
    return rows, cols


def check_grid_fits(grid: tuple[int, int], merge: int, pad: bool) -> None:
    """``ValueError`` if a ``merge`` x ``merge`` window does not divide ``grid`` and padding was not asked for."""
    rows, cols = grid
    if not pad and (rows % merge or cols % merge):
        raise ValueError(
            f"spatial_merge_size={merge} does not divide the {rows}x{cols} patch grid; "
            f"use a merge size that divides both sides or pass pad=True"
        )
