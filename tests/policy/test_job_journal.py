"""The job journal that lets a cut-off closed-loop table resume (``prismatic_tr.policy.job_journal``) and the
evaluation's use of it (``run_metaworld_jobs``: journaled jobs are reused, the others run and are reported)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prismatic_tr.policy.closed_loop import EpisodeOutcome
from prismatic_tr.policy.job_journal import JobJournal, checkpoint_fingerprint

IDENTITY = {"checkpoint_sha256": "abc", "split": "test", "episodes": 2, "execute_steps": None}


def outcomes(*results: str) -> list[EpisodeOutcome]:
    return [EpisodeOutcome(seed=3_000_000 + i, instruction="reach the goal", outcome=r, steps=10 + i)
            for i, r in enumerate(results)]


def test_jobs_survive_a_restart_and_only_missing_ones_are_listed(tmp_path: Path) -> None:
    path = tmp_path / "out" / "episodes.jsonl"
    journal = JobJournal(path, IDENTITY)
    assert journal.done == {} and path.is_file()
    journal.record("none", "reach-v3", outcomes("success", "timeout"))
    journal.record("none", "push-v3", outcomes("timeout", "timeout"))
    again = JobJournal(path, IDENTITY)
    assert again.done == journal.done and again.started_utc == journal.started_utc
    assert again.missing(["none", "diverse:0.5"], ["reach-v3", "push-v3"]) == [("diverse:0.5", "reach-v3"),
                                                                               ("diverse:0.5", "push-v3")]
    fresh = JobJournal(path, IDENTITY, resume=False)
    assert fresh.done == {} and len(path.read_text().splitlines()) == 1


@pytest.mark.parametrize("change, needle", [({"episodes": 3}, "episodes: 2 there, 3 here"),
                                            ({"checkpoint_sha256": "def"}, "checkpoint_sha256: 'abc' there"),
                                            ({"execute_steps": 4}, "execute_steps: None there, 4 here")])
def test_another_evaluations_journal_is_refused_naming_what_differs(tmp_path: Path, change: dict,
                                                                    needle: str) -> None:
    path = tmp_path / "episodes.jsonl"
    JobJournal(path, IDENTITY).record("none", "reach-v3", outcomes("success", "success"))
    with pytest.raises(ValueError, match=needle):
        JobJournal.check(path, {**IDENTITY, **change})
    with pytest.raises(ValueError, match="another evaluation"):
        JobJournal(path, {**IDENTITY, **change})
    assert JobJournal(path, {**IDENTITY, **change}, resume=False).done == {}
    path.write_text("not json\n")
    with pytest.raises(ValueError, match="is not a job journal"):
        JobJournal.check(path, IDENTITY)


def test_a_line_cut_off_mid_write_is_dropped_and_cannot_join_the_next(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    JobJournal(path, IDENTITY).record("none", "reach-v3", outcomes("success", "success"))
    with open(path, "a") as f:
        f.write('{"setting": "none", "task": "push-v3", "outc')  # killed mid-write: no newline
    journal = JobJournal(path, IDENTITY)
    assert list(journal.done) == [("none", "reach-v3")]
    journal.record("none", "push-v3", outcomes("timeout", "success"))
    assert list(JobJournal(path, IDENTITY).done) == [("none", "reach-v3"), ("none", "push-v3")]
    lines = path.read_text().splitlines()
    lines.insert(1, "garbage")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="line 2 is not a journaled job"):
        JobJournal(path, IDENTITY)


def test_the_fingerprint_follows_the_bytes_not_the_model_card(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 10)
    first = checkpoint_fingerprint(tmp_path)
    (tmp_path / "README.md").write_text("a card")
    assert checkpoint_fingerprint(tmp_path) == first
    for record in ("evaluation.json", "training_curve.csv", "demos.json",  # what an installed policy adds
                   "stage1_evaluation.json", "training_curve_stage1.csv", "demos_stage2.json"):   # a staged recipe's
        (tmp_path / record).write_text("{}")
    assert checkpoint_fingerprint(tmp_path) == first
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert checkpoint_fingerprint(tmp_path) != first
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "action_head--latest_checkpoint.pt").write_bytes(b"\x01")
    assert checkpoint_fingerprint(tmp_path) != first
    with pytest.raises(ValueError, match="is not a directory"):
        checkpoint_fingerprint(tmp_path / "missing")


class FakeWorkers:
    """Runs nothing itself: hands back the jobs asked for, as MetaWorldWorkers.run would, and records them."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []

    def run(self, settings, tasks, split, episodes, unnorm_key, image_size, batch_size, execute_steps, on_job=None,
            done=None):
        results = dict(done or {})
        for s in settings:
            for t in tasks:
                if (s, t) not in results:
                    self.ran.append((s, t))
                    results[s, t] = outcomes(*["success"] * episodes)
                    on_job(s, t, results[s, t])
        return {s: {t: results[s, t] for t in tasks} for s in settings}


def test_journaled_jobs_are_reused_and_the_others_are_reported_to_the_journal(tmp_path: Path) -> None:
    from prismatic_tr.policy.metaworld import run_metaworld_jobs
    from prismatic_tr.vla.spec import parse_setting

    journal = JobJournal(tmp_path / "episodes.jsonl", IDENTITY)
    journal.record("none", "reach-v3", outcomes("timeout", "timeout"))
    settings = [parse_setting("none"), parse_setting("diverse:0.5")]
    seen: list[str] = []
    workers = FakeWorkers()
    runs = run_metaworld_jobs(None, None, settings, ["reach-v3", "push-v3"], "test", 2, "k", workers=workers,
                              on_episode=lambda label, o: seen.append(label), on_job=journal.record,
                              done=journal.done)
    assert workers.ran == [("none", "push-v3"), ("diverse:0.5", "reach-v3"), ("diverse:0.5", "push-v3")]
    assert [o.outcome for o in runs["none"]["reach-v3"]] == ["timeout", "timeout"]
    assert seen == ["none"] * 2 + ["diverse:0.5"] * 4
    lines = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert [(r["setting"], r["task"]) for r in lines[1:]] == [("none", "reach-v3"), *workers.ran]
