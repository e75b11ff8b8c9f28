"""Flag a committed policy-step benchmark run anew under the current noise rule, without timing anything again.

The noise flags (:mod:`prismatic_tr.bench.measure.noise`) are a pure function of each row's medians and
percentiles, which results.json keeps; when the rule changes, a committed run is gauged again from its own numbers:
``vision_vs_baseline``, ``predict_action_spread``, ``total_spread``, ``noise_flag`` and ``noise_reason`` of every
timed row (:func:`~prismatic_tr.bench.measure.noise.add_noise_fields`, baseline first), an adapter row given its
setting's (its speed is that row's, copied: :mod:`prismatic_tr.bench.vla.policy_rows`), and what the job derives
from the flags: ``meta["noisy_rows"]``, ``meta["best_on_validation"]`` (chosen among rows not flagged noisy,
:mod:`prismatic_tr.bench.vla.selection`) and the rule's wording in ``meta["conventions"]["noise_flag"]``. A file
that changes is rewritten by the job's own writer (:func:`prismatic_tr.bench.vla.job.write_output`): its JSON, the
CSV beside it and, where a flag flipped, the PNG beside it (each only where the run wrote one), and its meta
records the refresh (``noise_flags_recomputed``: the rule, the date, this command, the rows that flipped). A file
already true to the rule is left byte for byte as it is, so running the command twice changes nothing.

    python -m prismatic_tr.bench.vla.reflag benchmarks/results            # every benchmark run under it
    python -m prismatic_tr.bench.vla.reflag benchmarks/results/policy/results.json --check   # exit 1 if stale

A directory is searched for ``*results.json`` files written by ``python vla_scripts/benchmark.py`` (its meta's
``command``); other JSON files there are skipped, and a file named on the command line that is not one is an error
(exit 2).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prismatic_tr.bench.measure.noise import NOISE_FIELDS, RECOMPUTED, NoiseRule, add_noise_fields
from prismatic_tr.bench.vla.job import COMMAND as BENCHMARK_COMMAND
from prismatic_tr.bench.vla.job import noise_convention, write_output
from prismatic_tr.bench.vla.selection import best_on_validation, chosen_settings
from prismatic_tr.cli import EXIT_BAD_INPUT

COMMAND = "python -m prismatic_tr.bench.vla.reflag"  # how a refreshed results.json names the command
STAMP = RECOMPUTED  # the meta field that records a refresh
GAUGED = ("vision_ms", "total_ms_p10", "total_ms_p90")  # what the rule needs of every timed row
END_TO_END = ("predict_action_ms_p10", "predict_action_ms_p90")  # the end-to-end spread's, where timed
RULE = NoiseRule()  # the current rule, the job's default


@dataclass
class Refresh:
    """One results file gauged again: its new records and meta, and what changed."""

    path: Path
    records: list[dict[str, Any]]
    meta: dict[str, Any]
    changed: bool  # the records or the derived meta differ from the file's
    flipped: list[str] = field(default_factory=list)  # "setting: noisy -> not noisy"
    notes: list[str] = field(default_factory=list)


def is_benchmark_run(data: Any) -> bool:
    """Whether a loaded JSON file is a results.json of the policy-step benchmark (its meta's ``command``)."""
    return (isinstance(data, dict) and isinstance(data.get("records"), list) and isinstance(data.get("meta"), dict)
            and str(data["meta"].get("command", "")).startswith(BENCHMARK_COMMAND))


def _with_slot(rec: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``rec`` with ``predict_action_spread`` placed where the writer puts it (after
    ``vision_vs_baseline``) when a run older than that field lacks it."""
    if "predict_action_spread" in rec or "vision_vs_baseline" not in rec:
        return dict(rec)
    out: dict[str, Any] = {}
    for key, value in rec.items():
        out[key] = value
        if key == "vision_vs_baseline":
            out["predict_action_spread"] = None
    return out


def regauge_records(records: Sequence[dict[str, Any]], rule: NoiseRule = RULE,
                    where: str = "results") -> tuple[list[dict[str, Any]], list[str]]:
    """(new records, notes): copies of ``records`` with every noise field recomputed under ``rule``.

    Timed rows (no ``adapter``; the first is the baseline) are gauged together; an adapter row takes the noise fields
    of its ``speed_from`` row. ValueError naming the row when a timed row lacks what the rule needs (``GAUGED``) or
    an adapter row's setting has no row. A run without ``predict_action_ms_p10`` / ``_p90`` is gauged without the
    end-to-end spread, and a note says so.
    """
    out = [_with_slot(r) for r in records]
    timed = [r for r in out if not r.get("adapter")]
    if not timed:
        raise ValueError(f"{where}: no timed row (every record is an adapter row); nothing to gauge")
    for rec in timed:
        missing = [k for k in GAUGED if rec.get(k) is None]
        if missing:
            raise ValueError(f"{where}: row {rec.get('setting', '?')!r} has no {', '.join(missing)}: the noise rule "
                             "cannot gauge it (is this a results.json of python vla_scripts/benchmark.py?)")
    notes = []
    untimed = [r.get("setting", "?") for r in timed if any(r.get(k) is None for k in END_TO_END)]
    if untimed:
        notes.append(f"{where}: {len(untimed)} of {len(timed)} timed rows have no predict_action_ms_p10 / _p90 "
                     f"({', '.join(untimed[:3])}{', ...' if len(untimed) > 3 else ''}): the run is gauged without "
                     "its end-to-end spread (predict_action_spread None), on the vision medians and the phase-sum "
                     "spread only")
    # add_noise_fields gauges the end-to-end spread where every row has it: a row's None p10 / p90 is left out
    probe = [{k: v for k, v in r.items() if not (k in END_TO_END and v is None)} for r in timed]
    add_noise_fields(probe, rule)
    for rec, gauged in zip(timed, probe, strict=True):
        rec.update({k: gauged[k] for k in NOISE_FIELDS})
    by_setting = {r["setting"]: r for r in timed}
    for rec in out:
        if rec.get("adapter"):
            source = by_setting.get(rec.get("speed_from"))
            if source is None:
                raise ValueError(f"{where}: adapter row {rec.get('setting', '?')!r} copies the speed of "
                                 f"{rec.get('speed_from')!r}, which has no timed row")
            rec.update({k: source[k] for k in NOISE_FIELDS})
    return out, notes


def regauge_meta(meta: dict[str, Any], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``meta`` with what the job derives from the flags recomputed from ``records``: ``noisy_rows``,
    ``best_on_validation`` (where the run chose one) and the rule's wording in ``conventions``."""
    out = copy.deepcopy(meta)
    out["noisy_rows"] = sum(bool(r.get("noise_flag")) for r in records)
    if "best_on_validation" in out:
        out["best_on_validation"] = chosen_settings(best_on_validation(records))
    if isinstance(out.get("conventions"), dict):
        out["conventions"]["noise_flag"] = noise_convention()
    return out


def _flips(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[str]:
    def word(flag: Any) -> str:
        return "noisy" if flag else "not noisy"

    return [f"{n.get('setting', '?')}: {word(o.get('noise_flag'))} -> {word(n.get('noise_flag'))}"
            for o, n in zip(old, new, strict=True) if bool(o.get("noise_flag")) != bool(n.get("noise_flag"))]


def refresh(path: Path, command: str = COMMAND, rule: NoiseRule = RULE,
            now: datetime.datetime | None = None) -> Refresh:
    """The results file at ``path`` gauged again under ``rule`` (nothing written). ValueError when it is not a
    results.json of the policy-step benchmark, or a row cannot be gauged."""
    data = json.loads(path.read_text())
    if not is_benchmark_run(data):
        raise ValueError(f"{path}: not a results.json of {BENCHMARK_COMMAND} (its meta's command says "
                         f"{str((data.get('meta') or {}).get('command') if isinstance(data, dict) else None)[:60]!r})")
    records, notes = regauge_records(data["records"], rule, where=str(path))
    meta = regauge_meta(data["meta"], records)
    changed = records != data["records"] or meta != data["meta"]
    flipped = _flips(data["records"], records)
    if changed:
        now = now or datetime.datetime.now(datetime.timezone.utc)
        meta[STAMP] = {"rule": rule.describe(), "date_utc": now.strftime("%Y-%m-%d %H:%M:%S"), "command": command,
                       "flipped": flipped, "noisy_rows_before": data["meta"].get("noisy_rows")}
        if notes:
            meta[STAMP]["note"] = "; ".join(notes)
    return Refresh(path, records, meta, changed, flipped, notes)


def write_refresh(result: Refresh) -> list[Path]:
    """Rewrite a changed file with the job's writer: the JSON, and the CSV and (where a flag flipped) the PNG of the
    same name beside it where the run wrote them; returns the paths written ([] when nothing changed)."""
    if not result.changed:
        return []
    paths = [result.path]
    paths += [p for p in [result.path.with_suffix(".csv")] if p.exists()]
    paths += [p for p in [result.path.with_suffix(".png")] if p.exists() and result.flipped]
    return [write_output(result.records, result.meta, p) for p in paths]


def find_runs(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """(benchmark results files, skipped files): a file is taken as named; a directory is searched for
    ``*results.json`` and keeps those :func:`is_benchmark_run` accepts."""
    runs, skipped = [], []
    for path in paths:
        if not path.is_dir():
            runs.append(path)
            continue
        for found in sorted(path.rglob("*results.json")):
            try:
                ok = is_benchmark_run(json.loads(found.read_text()))
            except (OSError, json.JSONDecodeError):
                ok = False
            (runs if ok else skipped).append(found)
    return runs, skipped


def _line(result: Refresh, check: bool) -> str:
    if not result.changed:
        return f"{result.path}: unchanged (true to the rule)"
    before, after = result.meta[STAMP]["noisy_rows_before"], result.meta["noisy_rows"]
    flips = "; ".join(result.flipped) or "no flag flipped"
    verb = "stale" if check else "refreshed"
    return f"{result.path}: {verb}: noisy rows {before} -> {after}; {flips}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="results.json files, or directories to search")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each file whose flags are not the current rule's")
    args = parser.parse_args(argv)
    command = " ".join([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    runs, skipped = find_runs(args.paths)
    results = []
    for path in runs:
        try:
            results.append(refresh(path, command))
        except (OSError, ValueError) as err:
            print(f"{COMMAND}: error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
    for path in skipped:
        print(f"{path}: skipped (not a results.json of {BENCHMARK_COMMAND})")
    for result in results:
        for note in result.notes:
            print(f"NOTE: {note}")
        print(_line(result, args.check))
        if not args.check:
            write_refresh(result)
    stale = [r for r in results if r.changed]
    print(f"rule: {RULE.describe()}; {len(stale)} of {len(results)} files "
          + ("differ from it" if args.check else "rewritten"))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
