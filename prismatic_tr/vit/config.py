"""Configuration, validation and static token-count schedules for in-backbone ViT reduction.

Per-layer plan: a list with one entry per block, each ``None`` (no reduction there) or a ``LayerStep``:
``LayerStep("keep", keep_ratio)`` (TopK keeps ``num_kept(patches, keep_ratio)`` patch tokens, the package's one
rounding rule (``prismatic_tr.reducers.config``); tome / hquota_ff merge the complement, at most half of the
patch tokens) or ``LayerStep("r", r)`` (merge r tokens, clamped to half; schedules in
``prismatic_tr.vit.merging.merge_schedule``). All counts are functions of shapes and config only, so
``tokens_per_location`` is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from prismatic_tr.reducers.config import num_kept
from prismatic_tr.vit.merging import merge_schedule

__all__ = ["METHODS", "LayerStep", "VitReductionConfig", "default_reduction_loc", "tokens_after", "tokens_per_location"]

METHODS = ("topk", "tome", "hquota_ff")
RSpec = int | list[int] | tuple[int, float]


class LayerStep(NamedTuple):
    kind: str  # "keep" or "r"
    value: float


# follows EViT (Liang et al., ICLR 2022; youweiliang/evit, Apache-2.0; see NOTICE): reduce at blocks 3/6/9 of 12.
def default_reduction_loc(depth: int) -> list[int]:
    """EViT's locations scaled to the depth: [3, 6, 9] for 12 blocks, [depth//4, depth//2, 3*depth//4]."""
    return sorted({max(0, depth // 4), depth // 2, (3 * depth) // 4})


def tokens_after(num_tokens: int, num_prefix: int, method: str, step: LayerStep | None) -> int:
    """Tokens leaving a block that received ``num_tokens`` (prefix included)."""
    if step is None:
        return num_tokens
    patches = num_tokens - num_prefix
    if method == "topk":
        return num_prefix + num_kept(patches, step.value)
    if step.kind == "keep":
        r = patches - num_kept(patches, step.value)
    else:
        r = int(step.value)
    return num_tokens - max(0, min(r, patches // 2))


@dataclass
class VitReductionConfig:
    """What to reduce and where. Validated in ``__post_init__`` (ValueError naming the bad value).

    method: "topk" | "tome" | "hquota_ff".
    keep_ratio: fraction of patch tokens kept at each of ``reduction_loc`` (float, or one per location);
        required for topk; for tome / hquota_ff an alternative to ``r``.
    r: tokens merged per block (tome / hquota_ff only): int (every block), per-block list (missing
        blocks 0), or (r, inflection) with inflection in [-1, 1]: r falls (< 0) or rises (> 0) linearly across
        the blocks around a mean of r (see ``merge_schedule``).
    reduction_loc: 0-based block indices for ``keep_ratio`` (default: EViT's [3, 6, 9] scaled to depth).
    hub_fraction: hquota_ff's share of kept patch tokens chosen as hubs, in [0, 1].
    prop_attn: proportional attention (log size added to attention logits) for tome / hquota_ff.
    """

    method: str
    keep_ratio: float | list[float] | None = None
    r: RSpec | None = None
    reduction_loc: list[int] | None = None
    hub_fraction: float = 0.5
    prop_attn: bool = True
    _rates: list[float] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; allowed: {', '.join(METHODS)}")
        if self.method == "topk" and self.r is not None:
            raise ValueError(f"r={self.r!r} is not allowed for topk; use keep_ratio in (0, 1]")
        if (self.keep_ratio is None) == (self.r is None):
            raise ValueError(f"give exactly one of keep_ratio / r for {self.method} (got keep_ratio={self.keep_ratio!r}, r={self.r!r})")
        if not 0.0 <= self.hub_fraction <= 1.0:
            raise ValueError(f"hub_fraction={self.hub_fraction!r} must be in [0, 1]")
        if self.keep_ratio is not None:
            rates = self.keep_ratio if isinstance(self.keep_ratio, (list, tuple)) else [self.keep_ratio]
            for rate in rates:
                if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 < rate <= 1.0:
                    raise ValueError(f"keep_ratio={rate!r} must be a number in (0, 1]")
            self._rates = [float(x) for x in rates]
        if self.r is not None:
            _check_r(self.r)
        if self.reduction_loc is not None:
            locs = list(self.reduction_loc)
            if any(isinstance(i, bool) or not isinstance(i, int) for i in locs) or len(set(locs)) != len(locs):
                raise ValueError(f"reduction_loc={self.reduction_loc!r} must be distinct integer block indices")
            self.reduction_loc = sorted(locs)

    def layer_plan(self, depth: int) -> list[LayerStep | None]:
        """One entry per block (see module doc). Raises ValueError for locations outside [0, depth)."""
        if self.r is not None:
            if self.reduction_loc is not None:
                raise ValueError(f"reduction_loc={self.reduction_loc!r} goes with keep_ratio, not r; give r as a per-block list")
            rs = merge_schedule(self.r, depth)  # ValueError for a list longer than depth
            return [LayerStep("r", float(r)) if r > 0 else None for r in rs]
        locs = self.reduction_loc if self.reduction_loc is not None else default_reduction_loc(depth)
        bad = [i for i in locs if not 0 <= i < depth]
        if bad:
            raise ValueError(f"reduction_loc entries {bad} outside the depth; allowed 0..{depth - 1}")
        rates = self._rates if len(self._rates) > 1 else self._rates * len(locs)
        if len(rates) != len(locs):
            raise ValueError(f"keep_ratio has {len(rates)} values for {len(locs)} reduction_loc entries; must match")
        plan: list[LayerStep | None] = [None] * depth
        for loc, rate in zip(locs, rates, strict=True):
            plan[loc] = LayerStep("keep", rate)
        return plan

    def check_r_allowed(self, num_tokens: int, num_prefix: int, depth: int) -> None:
        """ValueError if any per-block r exceeds (num_tokens - P) // 2, the most a block may merge from
        the input tokens (later blocks clamp r to half of what is left, as ``match_tokens`` does)."""
        if self.r is None:
            return
        limit = (num_tokens - num_prefix) // 2
        too_big = [r for r in merge_schedule(self.r, depth) if r > limit]
        if too_big:
            raise ValueError(f"r={self.r!r} merges {max(too_big)} tokens in one block; allowed at most {limit} "
                             f"for {num_tokens} tokens with {num_prefix} prefix tokens")


def _check_r(r: object) -> None:
    if isinstance(r, tuple):
        if len(r) != 2 or not isinstance(r[0], int) or r[0] < 0 or not -1.0 <= float(r[1]) <= 1.0:
            raise ValueError(f"r={r!r}: a schedule tuple must be (r >= 0 int, inflection in [-1, 1])")
        return
    values = r if isinstance(r, list) else [r]
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ValueError(f"r={r!r} must be a non-negative int, a list of them, or (r, inflection)")


def tokens_per_location(
    num_tokens: int,
    method: str,
    keep_ratio: float | list[float] | None = None,
    r: RSpec | None = None,
    reduction_loc: list[int] | None = None,
    depth: int = 12,
    num_prefix_tokens: int = 1,
) -> list[int]:
    """Token counts along the model, prefix tokens included: entry i (0 <= i < depth) is the number
    entering block i and entry ``depth`` the number leaving the last block (length depth + 1).

    ``num_tokens`` is the count entering block 0 (e.g. 197 for DeiT at 224 px: 196 patches + CLS).
    """
    cfg = VitReductionConfig(method=method, keep_ratio=keep_ratio, r=r, reduction_loc=reduction_loc)
    counts = [num_tokens]
    for step in cfg.layer_plan(depth):
        counts.append(tokens_after(counts[-1], num_prefix_tokens, method, step))
    return counts
