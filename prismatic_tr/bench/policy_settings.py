"""The settings of a policy-step benchmark: the unreduced baseline, then each method x ratio.

Light on imports (torch and the reducers only), so a command line can validate flags before building a model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prismatic_tr.reducers import available_methods

BASELINE = "none"
POOL_METHOD = "spatial_pool"
# The timed phases of one control step, in order (see prismatic_tr.bench.policy_step).
PHASES: tuple[str, ...] = ("vision", "reducer", "projector", "prefill", "decode")


@dataclass(frozen=True)
class Setting:
    """One benchmarked configuration; ``method == "none"`` is the unreduced baseline."""

    method: str
    reduction_ratio: float
    spatial_merge_size: int = 1

    @property
    def is_baseline(self) -> bool:
        return self.method == BASELINE


def build_settings(
    methods: Sequence[str], ratios: Sequence[float], spatial_merge_size: int | Sequence[int] = 2
) -> list[Setting]:
    """Baseline first, then each method x ratio; ``spatial_pool`` once per merge size (ratio 1/s**2).

    ``ValueError`` names an unknown method, a ratio outside (0, 1] or a merge size below 1.
    """
    allowed = available_methods()
    for m in methods:
        if m not in allowed:
            raise ValueError(f"unknown reduction method {m!r}; allowed: {', '.join(allowed)}")
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 < float(r) <= 1.0:
            raise ValueError(f"reduction ratio {r!r} is not allowed; it is the fraction of tokens kept, in (0, 1]")
    merges = [spatial_merge_size] if isinstance(spatial_merge_size, int) else list(spatial_merge_size)
    if not merges or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in merges):
        raise ValueError(f"spatial_merge_size={spatial_merge_size!r} is not allowed; use integers >= 1")
    if any(m != POOL_METHOD for m in methods) and not ratios:
        raise ValueError("ratios is empty; give at least one fraction of tokens to keep, in (0, 1]")
    settings = [Setting(BASELINE, 1.0)]
    for m in methods:
        if m == POOL_METHOD:
            settings += [Setting(m, 1.0 / (s * s), s) for s in merges]
        else:
            settings += [Setting(m, float(r), merges[0]) for r in ratios]
    return list(dict.fromkeys(settings))  # drop repeats, keep order


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
