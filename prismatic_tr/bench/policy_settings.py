"""The settings of a policy-step benchmark: the unreduced baseline, then each method x ratio.

Light on imports (torch and the reducers only), so a command line can validate flags before building a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prismatic_tr.reducers import available_methods

BASELINE = "none"
POOL_METHOD = "spatial_pool"


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
