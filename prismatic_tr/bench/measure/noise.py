"""Is a policy-step benchmark run trustworthy? Gauges of machine noise, and the rule that flags a row.

A setting that does not reduce inside the vision towers runs the same unreduced vision backbone on the same
image as the baseline, so its vision-phase median gauges the machine: where it departs from the baseline's,
something else was running and that row's speedup (or, if the baseline is the odd one out, every speedup) is
not a property of token reduction. The spread of a row's own runs (p90 / p10) gauges how steady the machine
was while that row was timed: the spread of the whole ``predict_action`` (end to end, what the row's headline
``predict_action_speedup`` divides), and the spread of its phase sum (what the phase-sum ``speedup`` divides).

The rule (:class:`NoiseRule`, applied by :func:`gauge_rows`):

* ``VISION_TOLERANCE = 0.05``: a row is flagged when its vision median is more than 5 % away from the
  baseline's; the baseline is flagged when its own is more than 5 % away from the median of all rows'
  vision medians. Rows that reduce inside the towers (``vision_reduced``) do less vision work by design and
  are gauged on their spread only. A departure d in a phase that takes a fraction f of the step moves the
  step's total by about f x d, so the limit bounds what drift in the vision phase can do to a row's total;
  drift in the other phases shows in the spread.
* ``SPREAD_LIMIT = 1.20``: a row is flagged when its end-to-end ``predict_action`` p90 is more than 1.2 x its p10,
  or its phase sum's (``total``) is. The end-to-end one is the headline's: a row whose phases were steady can still
  have an unsteady ``predict_action`` (what runs between and around the phases: Python, the host copy).

Both are defaults; :class:`NoiseRule` takes other limits.

Where to see it applied: the committed run of the main job, ``benchmarks/results/policy/results.json``
(written by ``python vla_scripts/benchmark.py``; its README gives the command, the machine, and which rows
the rule flagged), keeps ``vision_vs_baseline``, ``predict_action_spread``, ``total_spread``, ``noise_flag`` and
``noise_reason`` for every row and the rule's wording in ``meta["conventions"]["noise_flag"]``.

The rule is a pure function of the medians and percentiles, so it is tested with injected numbers
(``tests/bench/test_policy_benchmark.py``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

VISION_TOLERANCE = 0.05
SPREAD_LIMIT = 1.20
# The fields add_noise_fields writes into a record (what a row copied from another, an adapter row, copies too).
NOISE_FIELDS = ("vision_vs_baseline", "predict_action_spread", "total_spread", "noise_flag", "noise_reason")
# The results.json meta field that says a run's flags were recomputed under a later rule, from its own percentiles
# (python -m prismatic_tr.bench.vla.reflag): the rule, the date, the command, the rows that flipped.
RECOMPUTED = "noise_flags_recomputed"


@dataclass(frozen=True)
class NoiseRule:
    """Limits of :func:`gauge_rows`: relative vision departure, and the p90/p10 spread of a row's end-to-end
    ``predict_action`` and of its phase sum."""

    vision_tolerance: float = VISION_TOLERANCE
    spread_limit: float = SPREAD_LIMIT

    def __post_init__(self) -> None:
        if not 0.0 < self.vision_tolerance < 1.0:
            raise ValueError(f"vision_tolerance={self.vision_tolerance!r} is not allowed; use a fraction in (0, 1)")
        if not self.spread_limit > 1.0:
            raise ValueError(f"spread_limit={self.spread_limit!r} is not allowed; use a ratio > 1")

    def describe(self) -> str:
        return (f"a row is flagged when its vision median departs from the baseline's by more than "
                f"{self.vision_tolerance:.0%}, or the p90/p10 of its end-to-end predict_action or of its phase sum "
                f"exceeds {self.spread_limit:.2f}")


@dataclass(frozen=True)
class NoiseGauge:
    """The gauges of one row and the verdict."""

    vision_vs_baseline: float  # vision median / baseline vision median
    total_spread: float  # phase sum: total p90 / total p10
    end_to_end_spread: float | None  # predict_action p90 / p10 (None: not timed end to end)
    noise_flag: bool
    noise_reason: str  # "" when not flagged


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 1.0 if a == b else math.inf


def gauge_rows(vision_ms: Sequence[float], total_p10_ms: Sequence[float], total_p90_ms: Sequence[float],
               rule: NoiseRule = NoiseRule(), vision_reduced: Sequence[bool] | None = None,
               end_to_end_p10_ms: Sequence[float] | None = None,
               end_to_end_p90_ms: Sequence[float] | None = None) -> list[NoiseGauge]:
    """One :class:`NoiseGauge` per row; row 0 is the baseline.

    A row is flagged when its vision median departs from the baseline's by more than
    ``rule.vision_tolerance`` (relative), or the p90/p10 of its end-to-end ``predict_action``
    (``end_to_end_p10_ms`` / ``end_to_end_p90_ms``, when timed) or of its phase sum (``total_p10_ms`` /
    ``total_p90_ms``) exceeds ``rule.spread_limit``. The baseline is flagged on its spreads, or when its own vision
    median departs by more than the tolerance from the median of all rows' vision medians (then it is the odd one
    out and every speedup is off). Rows whose vision phase does less work (``vision_reduced``: reduction inside
    the vision towers) are gauged on their spreads only and left out of that median.
    """
    n = len(vision_ms)
    if not n == len(total_p10_ms) == len(total_p90_ms) >= 1:
        raise ValueError("gauge_rows() needs equally long, non-empty vision / p10 / p90 sequences")
    if (end_to_end_p10_ms is None) != (end_to_end_p90_ms is None):
        raise ValueError("end_to_end_p10_ms and end_to_end_p90_ms go together: pass both or neither")
    if end_to_end_p10_ms is not None and not len(end_to_end_p10_ms) == len(end_to_end_p90_ms) == n:
        raise ValueError(f"end-to-end p10 / p90 have {len(end_to_end_p10_ms)} / {len(end_to_end_p90_ms)} rows; "
                         f"the vision medians {n}: pass one per row")
    reduced = list(vision_reduced) if vision_reduced is not None else [False] * n
    base = vision_ms[0]
    typical = statistics.median([v for v, r in zip(vision_ms, reduced, strict=True) if not r])
    out = []
    for i, (v, p10, p90) in enumerate(zip(vision_ms, total_p10_ms, total_p90_ms, strict=True)):
        ratio, spread = _ratio(v, base), _ratio(p90, p10)
        e2e = _ratio(end_to_end_p90_ms[i], end_to_end_p10_ms[i]) if end_to_end_p10_ms is not None else None
        reasons = []
        if i > 0 and not reduced[i] and abs(ratio - 1.0) > rule.vision_tolerance:
            reasons.append(f"vision {v:.1f} ms is {ratio:.2f}x the baseline's {base:.1f} ms "
                           f"(tolerance {rule.vision_tolerance:.0%})")
        if i == 0 and abs(_ratio(v, typical) - 1.0) > rule.vision_tolerance:
            reasons.append(f"baseline vision {v:.1f} ms is {_ratio(v, typical):.2f}x the median of all rows "
                           f"({typical:.1f} ms): every speedup is off")
        if e2e is not None and e2e > rule.spread_limit:
            reasons.append(f"end-to-end predict_action p90/p10 {e2e:.2f} exceeds {rule.spread_limit:.2f}")
        if spread > rule.spread_limit:
            reasons.append(f"phase-sum total p90/p10 {spread:.2f} exceeds {rule.spread_limit:.2f}")
        out.append(NoiseGauge(ratio, spread, e2e, bool(reasons), "; ".join(reasons)))
    return out


def add_noise_fields(records: list[dict[str, Any]], rule: NoiseRule = NoiseRule()) -> None:
    """Add ``vision_vs_baseline``, ``predict_action_spread`` (end to end; None where a record has no
    ``predict_action_ms_p10`` / ``_p90``), ``total_spread`` (phase sum), ``noise_flag`` and ``noise_reason`` to
    every record (baseline first; needs ``vision_ms``, ``total_ms_p10``, ``total_ms_p90``) in place."""
    timed = all("predict_action_ms_p10" in r and "predict_action_ms_p90" in r for r in records)
    gauges = gauge_rows([r["vision_ms"] for r in records], [r["total_ms_p10"] for r in records],
                        [r["total_ms_p90"] for r in records], rule,
                        [bool(r.get("vision_reduced")) for r in records],
                        [r["predict_action_ms_p10"] for r in records] if timed else None,
                        [r["predict_action_ms_p90"] for r in records] if timed else None)
    for rec, g in zip(records, gauges, strict=True):
        rec.update(vision_vs_baseline=g.vision_vs_baseline, predict_action_spread=g.end_to_end_spread,
                   total_spread=g.total_spread, noise_flag=g.noise_flag, noise_reason=g.noise_reason)


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
