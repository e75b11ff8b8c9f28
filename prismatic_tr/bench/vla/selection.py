"""The main job's "best setting within 2 points" rule, as a pure function of its records.

A setting is chosen on **validation** episodes, never on the test episodes the job reports, and only among rows
that are a result: faster than unreduced end to end (``predict_action_speedup`` > 1) and not flagged noisy. Rows
run with a shipped adapter are not candidates: each adapter's stopping step was chosen on validation episodes,
so its validation success is not a fair signal. Where no row qualifies, a site's answer is None ("none").

>>> best = best_on_validation(records)          # {"projector": record or None, "vision": ..., "llm": ...}
>>> print("\\n".join(best_lines(best, max_loss=0.02)))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prismatic_tr.vla.spec import BASELINE

MAX_LOSS = 0.02  # 2 percentage points of success below unreduced
SELECT_ON = "validation_success_rate"  # the field a setting is chosen by
SPEED = "predict_action_speedup"  # end to end: the whole predict_action, baseline interleaved


def is_candidate(rec: dict[str, Any], floor: float, select_on: str = SELECT_ON) -> bool:
    """A row may be chosen: a reduction, no adapter, faster than unreduced, not noisy, success >= ``floor``."""
    return (rec.get("site", BASELINE) != BASELINE and not rec.get("adapter")
            and rec.get(select_on) is not None and rec.get(SPEED) is not None and rec[SPEED] > 1.0
            and not rec.get("noise_flag") and rec[select_on] >= floor)


def best_on_validation(records: Sequence[dict[str, Any]], max_loss: float = MAX_LOSS,
                       select_on: str = SELECT_ON) -> dict[str, dict[str, Any] | None]:
    """Per site present in ``records`` (baseline and adapter rows aside): the fastest candidate row (see
    :func:`is_candidate`) whose ``select_on`` success is at most ``max_loss`` (a fraction) below the unreduced
    row's, or None. ``{}`` when the unreduced row has no ``select_on`` value. ValueError for a ``max_loss``
    outside [0, 1]."""
    if not 0.0 <= max_loss <= 1.0:
        raise ValueError(f"max_loss={max_loss!r} is not allowed; use a fraction in [0, 1] (0.02 = 2 points)")
    base = next((r for r in records if r.get("site") == BASELINE), None)
    if base is None or base.get(select_on) is None:
        return {}
    floor = base[select_on] - max_loss - 1e-12
    best: dict[str, dict[str, Any] | None] = {}
    for rec in records:
        if rec.get("site", BASELINE) == BASELINE or rec.get("adapter"):
            continue
        best.setdefault(rec["site"], None)
        current = best[rec["site"]]
        if is_candidate(rec, floor, select_on) and (current is None or rec[SPEED] > current[SPEED]):
            best[rec["site"]] = rec
    return best


def chosen_settings(best: dict[str, dict[str, Any] | None]) -> dict[str, str | None]:
    """``{site: setting or None}``: what results.json keeps of :func:`best_on_validation` (``meta["best_on_validation"]``)."""
    return {site: (r["setting"] if r is not None else None) for site, r in best.items()}


def best_lines(best: dict[str, dict[str, Any] | None], max_loss: float = MAX_LOSS) -> list[str]:
    """One printed line per site: the chosen row with its end-to-end speedup, validation and test success, or
    ``none`` with the rule it failed."""
    points = f"{100 * max_loss:g} points"
    lines = []
    for site, rec in best.items():
        head = f"best {site} setting within {points} of unreduced success on validation episodes"
        if rec is None:
            lines.append(f"{head}: none (no row faster than unreduced end to end, not noisy and within {points})")
            continue
        test = f", test {rec['success_rate']:.0%}" if rec.get("success_rate") is not None else ""
        lines.append(f"{head}: {rec['setting']} ({rec[SPEED]:.2f}x end to end; success on validation "
                     f"{rec[SELECT_ON]:.0%}{test})")
    return lines
