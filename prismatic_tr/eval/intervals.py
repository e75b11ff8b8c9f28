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


def paired_difference_interval(
    both: int, only_first: int, only_second: int, neither: int, z: float = Z_95
) -> tuple[float, float, float]:
    """Difference of two success rates measured on the same trials, ``p1 - p2``, with its interval (default 95 %):
    (difference, low, high), each in [-1, 1].

    The counts are the paired table's: trials both succeeded, only the first, only the second, neither. The interval
    is Newcombe's square-and-add of the two Wilson intervals, corrected for the pairing by the table's correlation
    (Newcombe 1998, "Improved confidence intervals for the difference between binomial proportions based on paired
    data", method 10: the phi coefficient with its numerator ``ad - bc`` taken as ``ad - bc - n/2`` above ``n/2``,
    0 between 0 and ``n/2``). Pairing narrows the interval when the two agree on most trials, as two settings of
    one policy run on the same episodes do. ValueError for a negative count or no trials.
    """
    a, b, c, d = both, only_first, only_second, neither
    if min(a, b, c, d) < 0 or a + b + c + d == 0:
        raise ValueError(f"paired counts {(a, b, c, d)}: need four counts >= 0 and at least one trial")
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    numerator = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = numerator / math.sqrt(margins) if margins else 0.0
    diff = p1 - p2
    down = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    up = math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return diff, max(-1.0, diff - down), min(1.0, diff + up)
