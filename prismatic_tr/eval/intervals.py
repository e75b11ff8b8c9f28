"""Confidence intervals for success rates."""

from __future__ import annotations

import math

Z_95 = 1.959963984540054  # two-sided 95 % normal quantile


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (default 95 %): (low, high) in [0, 1].

    ``trials`` 0 gives (0, 1). ValueError for negative counts or more successes than trials.
    """
    if trials < 0 or successes < 0 or successes > trials:
        raise ValueError(f"successes={successes}, trials={trials}: need 0 <= successes <= trials")
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
