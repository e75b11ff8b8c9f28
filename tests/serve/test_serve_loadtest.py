"""The load tester catches a mixed-up answer: it sends observations whose reference actions differ, counts an
answer meant for another request as mismatched, and says so (or refuses) when a model's answers cannot be told
apart (a random-weight preset gives every observation the same action). No server: the HTTP session and the
server's answers are stood in for."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

json_numpy = pytest.importorskip("json_numpy", reason="the load tester speaks json-numpy (the serve extra)")

from prismatic_tr.serve import loadtest  # noqa: E402
from prismatic_tr.serve.loadtest import LoadTestConfig, Tally, distinguishable, pick_observations  # noqa: E402
from prismatic_tr.serve.report import markdown_table  # noqa: E402

REFS = [np.array([0.1, 0.2]), np.array([0.1, 0.2]), np.array([0.3, 0.2]), np.array([0.1, 0.2 + 1e-9]),
        np.array([0.5, 0.0])]


@dataclass
class Answer:
    status_code: int
    text: str


class Server:
    """Answers request body ``i`` with ``actions[answer_for[i]]`` (``answer_for``: who gets whose answer)."""

    def __init__(self, bodies: list[bytes], actions: list[np.ndarray], answer_for: list[int]) -> None:
        self.index = {body: i for i, body in enumerate(bodies)}
        self.actions, self.answer_for = actions, answer_for

    def post(self, url: str, data: bytes, headers: dict[str, str], timeout: float) -> Answer:
        return Answer(200, json_numpy.dumps(self.actions[self.answer_for[self.index[data]]]))


def send_all(refs: list[np.ndarray], answer_for: list[int]) -> Tally:
    """Every request once through the load tester's own check, the server answering as ``answer_for`` says."""
    cfg = LoadTestConfig(distinct=len(refs))
    bodies = [f"request {i}".encode() for i in range(len(refs))]
    tally, lock, server = Tally(), threading.Lock(), Server(bodies, refs, answer_for)
    for i in range(len(refs)):
        loadtest._send_one(server, cfg, i, bodies, refs, None, tally, lock)
    return tally


def test_distinguishable_keeps_the_first_of_each_answer():
    assert distinguishable(REFS, 10, atol=1e-6) == [0, 2, 4]  # 3 is 0 within atol
    assert distinguishable(REFS, 2, atol=1e-6) == [0, 2]
    assert distinguishable(REFS, 10, atol=1e-12) == [0, 2, 3, 4]
    assert distinguishable([np.zeros(2), np.zeros((1, 2))], 10, atol=1e-6) == [0, 1]  # shapes differ


def test_a_swapped_answer_is_mismatched():
    refs = [REFS[i] for i in distinguishable(REFS, 10, 1e-6)]
    assert send_all(refs, [0, 1, 2]).mismatched == 0
    swapped = send_all(refs, [1, 0, 2])  # requests 0 and 1 get each other's answers
    assert swapped.mismatched == 2 and swapped.max_abs_diff > 0.1


def test_among_equal_references_a_swap_passes_unseen_and_the_report_says_so():
    same = [np.array([0.1, 0.2])] * 3
    assert send_all(same, [1, 2, 0]).mismatched == 0  # every answer mixed up, none caught
    cfg = LoadTestConfig(distinct=3)
    report = loadtest.summarize(cfg, Tally(), 1.0, same, {}, {}, probed=8)
    assert report["mixup_detectable"] is False and report["probed_observations"] == 8
    table = markdown_table([{**report, "setting": "none", "actions_per_s": 1.0}])
    assert "| 0 / 0 / n/a |" in table and "could not be told from the right one" in table
    assert loadtest.summarize(cfg, Tally(), 1.0, REFS[:3:2], {}, {})["mixup_detectable"] is True


def test_pick_observations_flags_or_refuses_a_model_that_answers_alike():
    same = [np.array([0.1, 0.2])] * 6
    assert pick_observations(LoadTestConfig(distinct=4, candidates=6), REFS + [REFS[0]]) == [0, 2, 4]
    assert pick_observations(LoadTestConfig(distinct=4, candidates=6), same) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="same action"):
        pick_observations(LoadTestConfig(distinct=4, candidates=6, require_distinct=True), same)


@pytest.mark.parametrize("candidates", [0, 3, True, 2.5])
def test_bad_candidates(candidates):
    with pytest.raises(ValueError, match="candidates"):
        LoadTestConfig(distinct=4, candidates=candidates)


def test_the_load_sends_only_observations_with_differing_answers(monkeypatch):
    """run_load_test probes ``candidates`` observations and loads only those whose references differ."""
    probed = [np.array([0.1, 0.2])] * 3 + [np.array([0.4, 0.2]), np.array([0.1, 0.2]), np.array([0.7, 0.1])]
    seen: dict[str, Any] = {}
    monkeypatch.setattr(loadtest, "server_info", lambda url, timeout_s=30.0: {"min_images": 1})
    monkeypatch.setattr(loadtest, "payloads", lambda n, seed, *a: [{"image": i} for i in range(n)])
    monkeypatch.setattr(loadtest, "reference_actions", lambda cfg, bodies: probed[: len(bodies)])

    def run_clients(cfg: LoadTestConfig, good: list[bytes], refs: list[np.ndarray], bad: Any) -> tuple[Tally, float]:
        seen.update(good=good, refs=refs)
        return Tally(), 1.0

    monkeypatch.setattr(loadtest, "run_clients", run_clients)
    report = loadtest.run_load_test(LoadTestConfig(distinct=4, candidates=6))
    assert [json_numpy.loads(b)["image"] for b in seen["good"]] == [0, 3, 5]
    assert report["distinct_observations"] == report["distinct_reference_actions"] == 3
    assert report["probed_observations"] == 6 and report["mixup_detectable"] is True
