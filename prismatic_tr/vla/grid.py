"""The patch grid of an OpenVLA vision backbone, in one place: read from a live backbone (timm's
``patch_embed.grid_size``) or told from a ``config.json`` before any model is built (``side // patch`` per tower),
and which ``spatial_pool`` windows divide it. Light on imports, so a command line can check flags early."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any


def backbone_grid(backbone: Any) -> tuple[int, int] | None:
    """(rows, cols) of the featurizer's patch grid when timm exposes it, else None (inferred later)."""
    embed = getattr(getattr(backbone, "featurizer", None), "patch_embed", None)
    grid = getattr(embed, "grid_size", None)
    return (int(grid[0]), int(grid[1])) if grid is not None else None


def patch_grid(timm_model_ids: Sequence[str], image_sizes: Sequence[int],
               vision_specs: Sequence[Mapping[str, Any] | None] | None = None) -> tuple[int, int] | None:
    """(rows, cols) of the patch grid the vision tower(s) emit, from a model config's fields, or None when
    it cannot be told (no patch size in a spec or a ``patch<P>`` in the timm id, or towers that disagree).

    Patch size from ``vision_specs[i]["patch_size"]`` if given, else from the id (``..._patch14_...``); the
    side from ``vision_specs[i]["img_size"]`` if given, else ``image_sizes[i]``.
    """
    grids = set()
    for i, (timm_id, size) in enumerate(zip(timm_model_ids, image_sizes, strict=False)):
        spec = (vision_specs[i] if vision_specs is not None and i < len(vision_specs) else None) or {}
        found = re.search(r"patch(\d+)", str(timm_id))
        patch = spec.get("patch_size", int(found.group(1)) if found else None)
        side = spec.get("img_size", size)
        if not isinstance(patch, int) or not isinstance(side, int) or patch < 1:
            return None
        grids.add((side // patch, side // patch))
    return grids.pop() if len(grids) == 1 else None


def grid_from_config(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """:func:`patch_grid` of an OpenVLA-style ``config.json`` (``timm_model_ids``, ``image_sizes``,
    optional ``vision_specs``); None when those fields are missing."""
    ids, sizes = config.get("timm_model_ids"), config.get("image_sizes")
    if not ids or not sizes:
        return None
    return patch_grid(ids, sizes, config.get("vision_specs"))


def check_merge_sizes(merges: Sequence[int], grid: tuple[int, int], source: str) -> None:
    """``ValueError`` naming the first merge size that does not divide ``grid`` and the sizes that do."""
    rows, cols = grid
    bad = [s for s in merges if rows % s or cols % s]
    if bad:
        allowed = [s for s in range(1, min(rows, cols) + 1) if rows % s == 0 and cols % s == 0]
        raise ValueError(f"spatial_merge_size {bad[0]} does not divide the {rows}x{cols} patch grid of {source}; "
                         f"allowed: {', '.join(map(str, allowed))}")
