"""Is a policy-step benchmark run trustworthy? Gauges of machine noise, and the rule that flags a row.

A setting that does not reduce inside the vision towers runs the same unreduced vision backbone on the same
image as the baseline, so its vision-phase median gauges the machine: where it departs from the baseline's,
something else was running and that row's speedup (or, if the baseline is the odd one out, every speedup) is
not a property of token reduction. The spread of a row's own per-run totals (p90 / p10) gauges how steady
the machine was while that row was timed.

The rule (:class:`NoiseRule`, applied by :func:`gauge_rows`):

* ``VISION_TOLERANCE = 0.05``: a row is flagged when its vision median is more than 5 % away from the
  baseline's; the baseline is flagged when its own is more than 5 % away from the median of all rows'
  vision medians. Rows that reduce inside the towers (``vision_reduced``) do less vision work by design and
  are gauged on their spread only. A departure d in a phase that takes a fraction f of the step moves the
  step's total by about f x d, so the limit bounds what drift in the vision phase can do to a row's total;
  drift in the other phases shows in the spread.
* ``SPREAD_LIMIT = 1.20``: a row is flagged when its total's p90 is more than 1.2 x its p10.

Both are defaults; :class:`NoiseRule` takes other limits.

Where to see it applied: the committed run of the main job, ``benchmarks/results/policy/results.json``
(written by ``python vla_scripts/benchmark.py``; its README gives the command, the machine, and which rows
the rule flagged), keeps ``vision_vs_baseline``, ``total_spread``, ``noise_flag`` and ``noise_reason`` for
every row and the rule's wording in ``meta["conventions"]["noise_flag"]``.

The rule is a pure function of the medians and percentiles, so it is tested with injected numbers
(``tests/test_policy_benchmark.py``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

VISION_TOLERANCE = 0.05
SPREAD_LIMIT = 1.20


@dataclass(frozen=True)
class NoiseRule:
    """Limits of :func:`gauge_rows`: relative vision departure and p90/p10 spread of a row's total."""

    vision_tolerance: float = VISION_TOLERANCE
    spread_limit: float = SPREAD_LIMIT

    def __post_init__(self) -> None:
        if not 0.0 < self.vision_tolerance < 1.0:
            raise ValueError(f"vision_tolerance={self.vision_tolerance!r} is not allowed; use a fraction in (0, 1)")
        if not self.spread_limit > 1.0:
            raise ValueError(f"spread_limit={self.spread_limit!r} is not allowed; use a ratio > 1")

    def describe(self) -> str:
        return (f"a row is flagged when its vision median departs from the baseline's by more than "
                f"{self.vision_tolerance:.0%} or its total's p90/p10 exceeds {self.spread_limit:.2f}")


@dataclass(frozen=True)
class NoiseGauge:
    """The gauges of one row and the verdict."""

    vision_vs_baseline: float  # vision median / baseline vision median
    total_spread: float  # total p90 / total p10
    noise_flag: bool
    noise_reason: str  # "" when not flagged


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 1.0 if a == b else math.inf


def gauge_rows(vision_ms: Sequence[float], total_p10_ms: Sequence[float], total_p90_ms: Sequence[float],
               rule: NoiseRule = NoiseRule(), vision_reduced: Sequence[bool] | None = None) -> list[NoiseGauge]:
    """One :class:`NoiseGauge` per row; row 0 is the baseline.

    A row is flagged when its vision median departs from the baseline's by more than
    ``rule.vision_tolerance`` (relative), or its total's p90/p10 exceeds ``rule.spread_limit``. The
    baseline is flagged on its spread, or when its own vision median departs by more than the tolerance
    from the median of all rows' vision medians (then it is the odd one out and every speedup is off).
    Rows whose vision phase does less work (``vision_reduced``: reduction inside the vision towers) are
    gauged on their spread only and left out of that median.
    """
    if not len(vision_ms) == len(total_p10_ms) == len(total_p90_ms) >= 1:
        raise ValueError("gauge_rows() needs equally long, non-empty vision / p10 / p90 sequences")
    reduced = list(vision_reduced) if vision_reduced is not None else [False] * len(vision_ms)
    base = vision_ms[0]
    typical = statistics.median([v for v, r in zip(vision_ms, reduced, strict=True) if not r])
    out = []
    for i, (v, p10, p90) in enumerate(zip(vision_ms, total_p10_ms, total_p90_ms, strict=True)):
        ratio, spread = _ratio(v, base), _ratio(p90, p10)
        reasons = []
        if i > 0 and not reduced[i] and abs(ratio - 1.0) > rule.vision_tolerance:
            reasons.append(f"vision {v:.1f} ms is {ratio:.2f}x the baseline's {base:.1f} ms "
                           f"(tolerance {rule.vision_tolerance:.0%})")
        if i == 0 and abs(_ratio(v, typical) - 1.0) > rule.vision_tolerance:
            reasons.append(f"baseline vision {v:.1f} ms is {_ratio(v, typical):.2f}x the median of all rows "
                           f"({typical:.1f} ms): every speedup is off")
        if spread > rule.spread_limit:
            reasons.append(f"total p90/p10 {spread:.2f} exceeds {rule.spread_limit:.2f}")
        out.append(NoiseGauge(ratio, spread, bool(reasons), "; ".join(reasons)))
    return out


def add_noise_fields(records: list[dict[str, Any]], rule: NoiseRule = NoiseRule()) -> None:
    """Add ``vision_vs_baseline``, ``total_spread``, ``noise_flag`` and ``noise_reason`` to every record
    (baseline first; needs ``vision_ms``, ``total_ms_p10``, ``total_ms_p90``) in place."""
    gauges = gauge_rows([r["vision_ms"] for r in records], [r["total_ms_p10"] for r in records],
                        [r["total_ms_p90"] for r in records], rule,
                        [bool(r.get("vision_reduced")) for r in records])
    for rec, g in zip(records, gauges, strict=True):
        rec.update(vision_vs_baseline=g.vision_vs_baseline, total_spread=g.total_spread,
                   noise_flag=g.noise_flag, noise_reason=g.noise_reason)


def noise_warnings(records: Sequence[dict[str, Any]], load_average: Sequence[float] | None = None) -> list[str]:
    """Lines to print for a run with flagged rows (empty list when none is flagged): one warning per
    flagged row, then what to do."""
    flagged = [r for r in records if r.get("noise_flag")]
    if not flagged:
        return []
    lines = [f"WARNING: noisy row {r['method']} keep {r['reduction_ratio']:.3g}: {r['noise_reason']}"
             for r in flagged]
    load = "" if not load_average else (" (load average at start "
                                        + " / ".join(f"{x:.2f}" for x in load_average) + " for 1 / 5 / 15 min)")
    lines += [
        f"WARNING: {len(flagged)} of {len(records)} rows are flagged as noisy{load}; their speedups are not "
        "results.",
        "What to do: stop other jobs on this machine (or wait until it is quiet), on a shared CPU pass "
        "--num_threads 1, raise --num_runs so that medians settle, and run again; --strict makes a noisy run "
        "exit with status 3.",
    ]
    return lines
