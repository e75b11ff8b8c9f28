"""A journal of finished evaluation jobs, so a long closed-loop table that is cut off resumes where it stopped.

    journal = JobJournal(out / "episodes.jsonl", {"checkpoint": checkpoint_fingerprint(ckpt), "split": "test", ...})
    journal.done            # {(setting, task): [EpisodeOutcome, ...]} from earlier runs with the same identity
    journal.record("none", "reach-v3", outcomes)   # appended and flushed as each job ends

The file is JSON lines: a header ``{"identity": {...}, "started_utc": ...}``, then one line per finished
(setting, task) job with its outcomes. A job's outcomes are a pure function of the identity (the checkpoint's
bytes, the seed split, the episode count, the frame size, the lockstep batch, the chunk actions run open loop), the
setting and the task, so a later run with the same identity reuses them instead of running them again; a run with
another identity is refused, naming what differs. A line cut off mid-write (the process killed) is dropped.
Timings are never journaled: every run times all of its settings again, interleaved.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prismatic_tr.policy.closed_loop import EpisodeOutcome

# files of a checkpoint directory that do not change what it computes: the model card, and the records a recipe
# installs beside the weights (``oft_recipe.install``: the evaluation, the training curve, the demonstrations' summary,
# one per stage of a staged recipe: ``training_curve_stage1.csv``, ``stage1_evaluation.json``, ...), so an installed
# policy resumes the journal of the checkpoint it was copied from
MODEL_CARD = "README.md"
RECORDS = (("", "evaluation.json"), ("training_curve", ".csv"), ("demos", ".json"))  # (name starts, name ends)


def is_record(name: str) -> bool:
    """True for the model card and for a recipe's records (see ``RECORDS``), which the fingerprint skips."""
    return name == MODEL_CARD or any(name.startswith(a) and name.endswith(b) for a, b in RECORDS)


def checkpoint_fingerprint(checkpoint: str | Path) -> str:
    """sha256 over the lines ``<name> <sha256>`` of every file in the checkpoint directory (sorted; the model
    card and the installed records skipped): weights, OFT heads, config, statistics, tokenizer. ValueError when it
    is not a directory."""
    from prismatic_tr.policy.adapters import sha256_of

    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        raise ValueError(f"checkpoint {str(checkpoint)!r} is not a directory")
    digest = hashlib.sha256()
    for f in sorted(p for p in checkpoint.iterdir() if p.is_file() and not is_record(p.name)):
        digest.update(f"{f.name} {sha256_of(f)}\n".encode())
    return digest.hexdigest()


def _differences(found: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(found) | set(expected))
    return [f"{k}: {found.get(k)!r} there, {expected.get(k)!r} here" for k in keys if found.get(k) != expected.get(k)]


class JobJournal:
    """The finished (setting, task) jobs of evaluations with one ``identity`` (JSON-able values), kept at ``path``.

    ``resume=True`` reads an existing journal (ValueError when its identity differs, naming each difference);
    ``resume=False``, or no file yet, starts a new one (an existing file is replaced). ``done`` holds the jobs read.
    """

    def __init__(self, path: str | Path, identity: Mapping[str, Any], resume: bool = True) -> None:
        self.path, self.identity = Path(path), json.loads(json.dumps(dict(identity)))
        self.done: dict[tuple[str, str], list[EpisodeOutcome]] = {}
        self.started_utc = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        if resume and self.path.is_file():
            self._read()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write_lines([{"identity": self.identity, "started_utc": self.started_utc}], mode="w")

    @staticmethod
    def check(path: str | Path, identity: Mapping[str, Any]) -> dict[str, Any] | None:
        """The header of the journal at ``path`` (None when there is none yet); ValueError when it is not a journal
        or journals another identity, naming each difference. Cheap: reads the first line only."""
        path, identity = Path(path), json.loads(json.dumps(dict(identity)))
        if not path.is_file():
            return None
        with open(path) as f:
            first = f.readline()
        try:
            header = json.loads(first)
            found = header["identity"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{str(path)!r} is not a job journal (its first line has no 'identity'); remove it or "
                             "start afresh (resume off)") from None
        if found != identity:
            raise ValueError(f"{str(path)!r} journals episodes of another evaluation ("
                             + "; ".join(_differences(found, identity))
                             + "): give another output directory, or start afresh (resume off)")
        return header

    def _read(self) -> None:
        header = self.check(self.path, self.identity)
        lines = self.path.read_text().splitlines()
        self.started_utc = header.get("started_utc", self.started_utc)
        for n, line in enumerate(lines[1:], start=2):
            try:
                job = json.loads(line)
                outcomes = [EpisodeOutcome(**o) for o in job["outcomes"]]
                self.done[job["setting"], job["task"]] = outcomes
            except (json.JSONDecodeError, KeyError, TypeError):
                if n == len(lines):  # the last line, cut off when the writer was killed: that job runs again
                    break
                raise ValueError(f"{str(self.path)!r} line {n} is not a journaled job: {line[:80]!r}") from None
        # written again whole, so that a cut-off last line (or a missing newline) cannot join the next record
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in [header, *self._job_lines(self.done)]))
        tmp.replace(self.path)

    @staticmethod
    def _job_lines(jobs: Mapping[tuple[str, str], Sequence[EpisodeOutcome]]) -> list[dict[str, Any]]:
        return [{"setting": s, "task": t, "outcomes": [asdict(o) for o in outcomes]} for (s, t), outcomes in jobs.items()]

    def _write_lines(self, records: Sequence[Mapping[str, Any]], mode: str = "a") -> None:
        with open(self.path, mode) as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def record(self, setting: str, task: str, outcomes: Sequence[EpisodeOutcome]) -> None:
        """Append one finished job (and keep it in ``done``)."""
        self.done[setting, task] = list(outcomes)
        self._write_lines(self._job_lines({(setting, task): outcomes}))

    def missing(self, settings: Sequence[str], tasks: Sequence[str]) -> list[tuple[str, str]]:
        """The (setting, task) pairs not yet done, in order."""
        return [(s, t) for s in settings for t in tasks if (s, t) not in self.done]
