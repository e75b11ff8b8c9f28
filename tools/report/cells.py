"""How one number is written in a table cell (success with its interval, speed-ups, settings, machines), and the
markdown table itself."""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from prismatic_tr.vla.settings import DEFAULT_METHODS

ADAPTER_MARK = "\u2020"  # dagger: the adapter row's speed is its setting's


# ---------------------------------------------------------------- cells

def pct(rate: float | None, low: float | None = None, high: float | None = None) -> str:
    """``96 % (87-99 %)``; ``-`` when not measured."""
    if rate is None:
        return "-"
    text = f"{100 * rate:.0f} %"
    return text + (f" ({100 * low:.0f}-{100 * high:.0f} %)" if low is not None and high is not None else "")


def success(rec: dict[str, Any] | None, prefix: str = "") -> str:
    if rec is None:
        return "-"
    return pct(rec.get(f"{prefix}success_rate"), rec.get(f"{prefix}success_ci_low"), rec.get(f"{prefix}success_ci_high"))


def success_exact(rec: dict[str, Any] | None) -> str:
    """``99.5 % (97.2-99.9 %)``: one decimal, for 200-episode figures whose half points matter; ``-`` if absent."""
    if rec is None:
        return "-"
    return (f"{100 * rec['success_rate']:.1f} % ({100 * rec['success_ci_low']:.1f}-"
            f"{100 * rec['success_ci_high']:.1f} %)")


def points_change(diff: float, low: float, high: float) -> str:
    """``-1.4 (-3.3 to +0.5)``: a difference of success rates and its interval, in percentage points (a value that
    rounds to zero reads ``0.0``, unsigned)."""
    def signed(x: float) -> str:
        text = f"{100 * x:+.1f}"
        return "0.0" if text in ("+0.0", "-0.0") else text

    return f"{signed(diff)} ({signed(low)} to {signed(high)})"


def paired_change(base: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]) -> str:
    """``-1.4 (-3.3 to +0.5)``: ``other``'s success minus ``base``'s over the episodes both ran (per-task evaluation
    records, paired by task and seed), in points with the paired 95 % interval; ``-`` when they share no episode or
    a record names no seeds (it cannot be paired)."""
    from prismatic_tr.eval.intervals import paired_difference_interval
    from prismatic_tr.policy.closed_loop import record_successes

    def outcomes(tasks: dict[str, dict[str, Any]]) -> dict[tuple[str, int], bool]:
        return {(task, seed): won for task, rec in tasks.items() for seed, won in record_successes(rec).items()}

    if not all("failed_seeds" in rec for rec in (*base.values(), *other.values())):
        return "-"
    first, second = outcomes(other), outcomes(base)
    shared = first.keys() & second.keys()
    if not shared:
        return "-"
    counts = [sum(first[k] == x and second[k] == y for k in shared) for x, y in
              ((True, True), (True, False), (False, True), (False, False))]
    return points_change(*paired_difference_interval(*counts))


SLOWER = " (slower)"


def speedup(x: float) -> str:
    """``1.42x``; a speed-up under 1 (the setting is slower than the unreduced model) says so: ``0.83x (slower)``."""
    return f"{x:.2f}x" + (SLOWER if round(x, 2) < 1.0 else "")


def end_to_end(rec: dict[str, Any]) -> str:
    """``predict_action_speedup``, ``*`` when the row is flagged noisy, a dagger on an adapter row."""
    return (speedup(rec['predict_action_speedup']) + ("*" if rec.get("noise_flag") else "")
            + (ADAPTER_MARK if rec.get("adapter") else ""))


def fraction_words(depth: float) -> str:
    f = Fraction(depth).limit_denominator(20)
    return f"{f.numerator}/{f.denominator}"


def _family_parts(family: str) -> list[tuple[str, str, float | None, bool]]:
    """(site, method, depth fraction, compact) per part of a record's ``method`` (its family, e.g.
    ``vision:diverse@0.25:compact+llm:attention@0.25`` or ``diverse``; see ``Setting.family``)."""
    parts = []
    for part in family.split("+"):
        compact = part.endswith(":compact")
        part = part.removesuffix(":compact")
        site, _, rest = part.partition(":")
        if site in ("vision", "llm") and rest:
            method, _, depth = rest.partition("@")
            parts.append((site, method, float(depth) if depth else None, compact))
        else:
            parts.append(("projector", part, None, compact))
    return parts


def describe(rec: dict[str, Any]) -> str:
    """Where a row's tokens are cut and by which method, in words (from its ``site`` and ``method`` fields)."""
    if rec.get("adapter"):
        return f"`{rec['speed_from']}` with its shipped fine-tuned adapter (`{rec['adapter']}`)"
    if rec["site"] == "none":
        return "nowhere"
    words = []
    for site, method, depth, compact in _family_parts(rec["method"]):
        where = {"projector": "after the backbone (`projector`)",
                 "vision": f"inside both towers after {fraction_words(depth or 0)} of their blocks (`vision`)",
                 "llm": f"inside the language model after {fraction_words(depth or 0)} of its layers (`llm`)"}[site]
        default = " (default)" if method == DEFAULT_METHODS[site] and site != "llm" else ""
        words.append(f"{where}, `{method}`{default}" + (", the earlier renumbered positions (`:compact`)" if compact else ""))
    return " + ".join(words)


def keep(rec: dict[str, Any]) -> str:
    return "all" if rec["site"] == "none" else f"{rec['reduction_ratio']:g}"


def dtype_speeds(rec: dict[str, Any], by_dtype: dict[str, dict[str, dict[str, Any]]]) -> str:
    """``2.05 / 1.53x`` (float32 / bfloat16, one machine) where both files have the row's setting, else ``-``."""
    label = rec.get("speed_from", rec["setting"])
    rows = [by_dtype.get(d, {}).get(label) for d in ("float32", "bfloat16")]
    if any(r is None for r in rows):
        return "-"
    slower = [d for d, r in zip(("float32", "bfloat16"), rows, strict=True) if round(r["predict_action_speedup"], 2) < 1]
    return (" / ".join(f"{r['predict_action_speedup']:.2f}" for r in rows) + "x"
            + (f" (slower in {' and '.join(slower)})" if slower else ""))


def page_command(command: str, kept_as: str) -> str:
    """A recorded command as a page shows it: an ``--output_dir`` outside the repository (an absolute path on the
    machine that ran it, which a reader cannot open) becomes ``OUT``, and the page says which committed file holds
    what it wrote (``kept_as``); a command that wrote into the repository is shown as recorded."""
    out = re.search(r"--output_dir (/\S+)", command)
    if out is None:
        return f"`{command}`"
    return f"`{command.replace(out.group(1), 'OUT')}` (OUT a folder outside the repository; its results: `{kept_as}`)"


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |",
            *("| " + " | ".join(row) + " |" for row in rows)]


def episodes_of(records: Sequence[dict[str, Any]], key: str) -> int | None:
    return next((r[key] for r in records if r.get(key)), None)


def cpu_words(meta: dict[str, Any]) -> str:
    cpu = meta.get("machine", {}).get("cpu")
    if not cpu:
        return "CPU features not recorded by this run"
    have = [f for f, on in cpu["features"].items() if on]
    return f"{cpu['model']} ({', '.join(have) if have else 'none of ' + ', '.join(cpu['features'])})"


def best_words(meta: dict[str, Any]) -> str:
    best = meta.get("best_on_validation")
    if best is None:
        return "not chosen by this run (no validation episodes recorded)"
    return "; ".join(f"`{site}`: {f'`{s}`' if s else 'none'}" for site, s in best.items()) or "none"
NOISY = "noisy"


def headline_speed(rec: dict[str, Any] | None, adapter: bool = False) -> str:
    """End-to-end speed-up of a headline cell; ``noisy`` (never the number) where its run flagged the row, ``-``
    where not measured; a dagger on an adapter's (its setting's speed: merged LoRA, the same shapes)."""
    if rec is None:
        return "-"
    text = NOISY if rec.get("noise_flag") else speedup(rec["predict_action_speedup"])
    return text + (ADAPTER_MARK if adapter else "")


def cores_of(meta: dict[str, Any]) -> int | None:
    """The core count a results file records: ``machine.cores`` (``bench.measure.devices.machine_info``) or, in the
    policy-step benchmark's files, ``machine.cpu_count``."""
    machine = meta.get("machine", {})
    return machine.get("cores", machine.get("cpu_count"))


def machine_words(meta: dict[str, Any]) -> str:
    cores = cores_of(meta)
    return f"{cpu_words(meta)}" + (f", {cores} cores" if cores else "")


def cut_words(rec: dict[str, Any]) -> str:
    return f"{rec.get('cut') or 'none'} / {rec.get('policy_cut') or 'none'}"


def recomputed(meta: dict[str, Any]) -> str:
    """`` (flags recomputed <date> under the current rule by `<command>`)`` where a run's noise flags were gauged
    again from its own percentiles after it ran (:mod:`prismatic_tr.bench.vla.reflag`), else ``""``."""
    from prismatic_tr.bench.measure.noise import RECOMPUTED

    redone = meta.get(RECOMPUTED)
    if not redone:
        return ""
    return f" (flags recomputed {redone['date_utc'][:10]} under the current rule by `{redone['command']}`)"
