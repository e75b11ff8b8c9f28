"""``spatial_pool``: average-pool neighbouring patches on the 2-D grid."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput, check_grid_fits, infer_grid
from prismatic_tr.reducers.registry import register_strategy


def pooled_grid(n_patch: int, cfg: ReducerConfig) -> tuple[tuple[int, int], tuple[int, int]]:
    """(input grid, output grid) for ``n_patch`` tokens; ``ValueError`` if the grid does not fit."""
    grid = cfg.grid_size if cfg.grid_size is not None else infer_grid(n_patch)
    if grid[0] * grid[1] != n_patch:
        raise ValueError(f"grid_size={grid} holds {grid[0] * grid[1]} patches but the input has {n_patch}")
    s = cfg.spatial_merge_size
    check_grid_fits(grid, s, cfg.pad)
    return grid, (math.ceil(grid[0] / s), math.ceil(grid[1] / s))


def count_pooled(n_patch: int, cfg: ReducerConfig) -> int:
    """K = ceil(rows / s) * ceil(cols / s) for window and stride s."""
    out = pooled_grid(n_patch, cfg)[1]
    return out[0] * out[1]


def _window_sum(grid: torch.Tensor, s: int) -> torch.Tensor:
    """(B, R, C, D) with R, C multiples of s -> (B, R/s, C/s, D) sums of s x s windows (views + one reduction)."""
    b, r, c, d = grid.shape
    return grid.reshape(b, r // s, s, c // s, s, d).sum(dim=(2, 4))


def _padded_window_mean(patches: torch.Tensor, grid: tuple[int, int], s: int) -> torch.Tensor:
    """Window means over a grid the window does not divide: pad with zeros, divide by real counts."""
    b, _, d = patches.shape
    rows, cols = grid
    pad_r, pad_c = (-rows) % s, (-cols) % s
    x = F.pad(patches.reshape(b, rows, cols, d), (0, 0, 0, pad_c, 0, pad_r))
    ones = F.pad(patches.new_ones(1, rows, cols, 1), (0, 0, 0, pad_c, 0, pad_r))
    return _window_sum(x, s) / _window_sum(ones, s)


@register_strategy("spatial_pool", count=count_pooled)
def reduce_spatial_pool(
    patches: torch.Tensor, cfg: ReducerConfig, generator: torch.Generator | None = None
) -> ReductionOutput:
    """(B, H*W, D) -> (B, ceil(H/s)*ceil(W/s), D): mean of each s x s window, row-major.

    Row-major patches reshape to (B, H/s, s, W/s, s, D) as a view, so the pooling is a single mean kernel
    (any dtype). With ``pad=True`` an edge window that sticks out averages only the patches it covers.
    ``indices`` holds the row-major index of each window's top-left patch; ``positions`` where each pooled token
    stands among the input patches (``cfg.pool_position``: the mean row-major index of the patches it averages,
    or its top-left patch's). The grid is checked from shapes.
    """
    b, n, d = patches.shape
    (rows, cols), (out_r, out_c) = pooled_grid(n, cfg)
    s = cfg.spatial_merge_size
    if rows % s == 0 and cols % s == 0:
        pooled = patches.reshape(b, out_r, s, out_c, s, d).mean(dim=(2, 4))
    else:
        pooled = _padded_window_mean(patches, (rows, cols), s)
    tokens = pooled.reshape(b, out_r * out_c, d)
    r = torch.arange(out_r, device=patches.device) * (s * cols)
    c = torch.arange(out_c, device=patches.device) * s
    idx = (r[:, None] + c[None, :]).reshape(1, -1).expand(b, -1)
    return ReductionOutput(tokens, idx, pooled_positions(idx, (rows, cols), s, cfg.pool_position))


def pooled_positions(first: torch.Tensor, grid: tuple[int, int], s: int, rule: str) -> torch.Tensor:
    """(B, K) top-left patch index of each window -> (B, K) float32 position of its pooled token.

    ``"first"``: the top-left index itself. ``"mean"``: the mean row-major index of the patches the window
    covers (edge windows of a padded grid cover fewer: their mean is over the real patches only).
    """
    rows, cols = grid
    if rule == "first":
        return first.float()
    if rows % s == 0 and cols % s == 0:  # every window is whole: one offset for all
        return first.float() + (s - 1) / 2 * (cols + 1)
    r0, c0 = first // cols, first % cols
    n_r = (rows - r0).clamp(max=s).float()  # real rows / columns of each window
    n_c = (cols - c0).clamp(max=s).float()
    return r0 * cols + c0 + (n_r - 1) / 2 * cols + (n_c - 1) / 2
