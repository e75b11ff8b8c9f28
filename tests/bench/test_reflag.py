"""``python -m prismatic_tr.bench.vla.reflag``: a committed policy-step benchmark run flagged anew under the current
noise rule from its own medians and percentiles (nothing timed), idempotent, the job's derived fields following the
flags; and every committed run under ``benchmarks/results/`` is true to the rule."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from prismatic_tr.bench.measure.noise import NOISE_FIELDS, add_noise_fields
from prismatic_tr.bench.vla.reflag import STAMP, main, refresh

ROOT = Path(__file__).resolve().parents[2]

# (setting, site, vision ms, phase-sum p10/p90, predict_action p10/p90, end-to-end speedup, validation success):
# "vision:b" has steady phases (1.1) but an unsteady predict_action (1.3): flagged only by the end-to-end spread.
ROWS = (
    ("none", "none", 100.0, (200.0, 220.0), (300.0, 330.0), 1.0, 0.90),
    ("vision:a", "vision", 60.0, (150.0, 165.0), (250.0, 275.0), 1.2, 0.89),
    ("vision:b", "vision", 50.0, (140.0, 154.0), (240.0, 312.0), 1.4, 0.90),
)


def old_records(end_to_end: bool = True) -> list[dict]:
    """Rows as a run under the old rule wrote them (no predict_action_spread, phase-sum flags only), the adapter
    row of ``vision:b`` after its setting's."""
    out = []
    for setting, site, vision, (p10, p90), (e10, e90), speed, val in ROWS:
        rec = {"method": setting.split(":")[-1], "setting": setting, "site": site, "vision_ms": vision,
               "vision_reduced": site == "vision", "total_ms_p10": p10, "total_ms_p90": p90,
               "predict_action_ms_p10": e10, "predict_action_ms_p90": e90, "predict_action_speedup": speed,
               "vision_vs_baseline": vision / 100.0, "total_spread": p90 / p10, "noise_flag": False,
               "noise_reason": "", "validation_success_rate": val}
        if not end_to_end:
            del rec["predict_action_ms_p10"], rec["predict_action_ms_p90"]
        out.append(rec)
    adapter = dict(out[2], setting="vision:b with adapter x", method="b (adapter)", adapter="x", speed_from="vision:b",
                   validation_success_rate=0.95)
    return out + [adapter]


def write_run(tmp_path: Path, records: list[dict], meta: dict | None = None) -> Path:
    path = tmp_path / "results.json"
    meta = meta or {"command": "python vla_scripts/benchmark.py --output_dir x", "noisy_rows": 0,
                    "conventions": {"noise_flag": "the old rule's words"},
                    "best_on_validation": {"vision": "vision:b"}}
    path.write_text(json.dumps({"meta": meta, "records": records}, indent=2) + "\n")
    (tmp_path / "results.csv").write_text("stale\n")
    return path


def test_noise_fields_are_what_add_noise_fields_writes() -> None:
    records = [{k: v for k, v in r.items() if k not in NOISE_FIELDS} for r in old_records()[:3]]
    before = {k for r in records for k in r}
    add_noise_fields(records)
    assert {k for r in records for k in r} - before == set(NOISE_FIELDS)


def test_a_wide_end_to_end_spread_is_flagged_after_the_refresh(tmp_path: Path, capsys) -> None:
    path = write_run(tmp_path, old_records())
    assert main([str(path)]) == 0
    assert "vision:b: not noisy -> noisy" in capsys.readouterr().out
    data = json.loads(path.read_text())
    rows = {r["setting"]: r for r in data["records"]}
    assert [r["noise_flag"] for r in data["records"]] == [False, False, True, True]  # the adapter row its setting's
    assert "end-to-end predict_action p90/p10 1.30" in rows["vision:b"]["noise_reason"]
    assert rows["vision:b"]["predict_action_spread"] == pytest.approx(1.3)
    assert rows["vision:b with adapter x"]["noise_reason"] == rows["vision:b"]["noise_reason"]
    keys = list(rows["none"])  # the new field where the writer puts it
    assert keys[keys.index("vision_vs_baseline") + 1] == "predict_action_spread"
    meta = data["meta"]
    assert meta["noisy_rows"] == 2
    assert meta["best_on_validation"] == {"vision": "vision:a"}  # the faster vision:b is noisy now
    assert "end-to-end predict_action" in meta["conventions"]["noise_flag"]
    assert meta[STAMP]["flipped"] == ["vision:b: not noisy -> noisy",
                                      "vision:b with adapter x: not noisy -> noisy"]
    assert meta[STAMP]["command"] == f"python -m prismatic_tr.bench.vla.reflag {path}"
    assert meta[STAMP]["noisy_rows_before"] == 0 and "end-to-end" in meta[STAMP]["rule"]
    with (tmp_path / "results.csv").open() as fh:  # rewritten by the job's writer, a row per record
        assert [r["noise_flag"] for r in csv.DictReader(fh)] == ["False", "False", "True", "True"]


def test_the_refresh_is_idempotent(tmp_path: Path, capsys) -> None:
    path = write_run(tmp_path, old_records())
    assert main([str(tmp_path), "--check"]) == 1  # stale, nothing written
    assert json.loads(path.read_text())["meta"]["noisy_rows"] == 0
    assert main([str(tmp_path)]) == 0
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main([str(tmp_path)]) == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == first
    assert main([str(tmp_path), "--check"]) == 0
    assert "unchanged (true to the rule)" in capsys.readouterr().out
    assert refresh(path).changed is False


def test_a_run_without_end_to_end_percentiles_is_gauged_on_the_rest_with_a_note(tmp_path: Path, capsys) -> None:
    path = write_run(tmp_path, old_records(end_to_end=False))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "NOTE:" in out and "have no predict_action_ms_p10 / _p90" in out and "without its end-to-end spread" in out
    data = json.loads(path.read_text())
    assert all(r["predict_action_spread"] is None for r in data["records"])
    assert [r["noise_flag"] for r in data["records"]] == [False] * 4  # steady phases, steady vision
    assert "without its end-to-end spread" in data["meta"][STAMP]["note"]


@pytest.mark.parametrize(("break_it", "needle"), [
    (lambda d: d["records"][1].pop("total_ms_p90"), "row 'vision:a' has no total_ms_p90"),
    (lambda d: d["meta"].update(command="python vla_scripts/eval_policy.py"), "not a results.json of python "
                                                                               "vla_scripts/benchmark.py"),
    (lambda d: d["records"][3].update(speed_from="vision:c"), "copies the speed of 'vision:c'"),
])
def test_a_file_the_rule_cannot_gauge_is_an_error_naming_why(tmp_path: Path, capsys, break_it, needle) -> None:
    path = write_run(tmp_path, old_records())
    data = json.loads(path.read_text())
    break_it(data)
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    assert main([str(path)]) == 2
    assert needle in capsys.readouterr().err
    assert path.read_bytes() == before


def test_every_committed_benchmark_run_is_true_to_the_noise_rule(capsys) -> None:
    """The committed flags are the current rule's (else: python -m prismatic_tr.bench.vla.reflag benchmarks/results)."""
    status = main([str(ROOT / "benchmarks" / "results"), "--check"])
    assert status == 0, capsys.readouterr().out
