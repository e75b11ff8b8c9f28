"""The deploy server (``prismatic_tr.serve``, ``vla_scripts/deploy.py``) on a free loopback port, tiny model.

OpenVLA's client code runs unchanged against it (the request exactly as OpenVLA's deploy.py docstring sends it,
and the double-encoded form); concurrent requests are batched and each answer equals the same request served
alone; every class of bad input gets a 4xx naming the field, a model exception a 500 with an id while the other
requests of its batch are answered; a client that disconnects costs no model call; SIGTERM answers the requests
in flight before the process exits; a short load test and soak through the command line end clean.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
json_numpy = pytest.importorskip("json_numpy")
requests = pytest.importorskip("requests")

from helpers.server import EXITED_ON_SIGTERM, TIMEOUT, free_port, start, wait_until  # noqa: E402

from prismatic_tr.serve import (  # noqa: E402
    ActRequest,
    ServeLimits,
    create_app,
    load_served_policy,
    make_server,
)
from prismatic_tr.serve.batcher import MicroBatcher, run_guarded  # noqa: E402
from prismatic_tr.serve.errors import ModelError  # noqa: E402
from prismatic_tr.serve.loadtest import BAD_KINDS, PROPRIO_KINDS, bad_body, observations, payloads  # noqa: E402
from prismatic_tr.serve.report import markdown_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXPLODE = "explode"  # an instruction on which the test policy's model raises
SLOW = "slowly"  # an instruction on which it sleeps first (SLOW_S), to hold a batch in the model
SLOW_S = 1.0


class FaultyPolicy:
    """The tiny served policy, with a model that raises on EXPLODE and sleeps on SLOW (the faults under test)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.calls: list[int] = []  # batch sizes the model ran

    spec = property(lambda self: self.policy.spec)

    def info(self) -> dict[str, Any]:
        return self.policy.info()

    def predict(self, batch: list[ActRequest]) -> list[np.ndarray]:
        self.calls.append(len(batch))
        if any(r.instruction == EXPLODE for r in batch):
            raise RuntimeError("the model exploded")
        if any(r.instruction == SLOW for r in batch):
            time.sleep(SLOW_S)
        return self.policy.predict(batch)


@pytest.fixture(scope="module")
def policy() -> Any:
    return load_served_policy(preset="tiny", dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def server(policy: Any) -> Iterator[tuple[str, FaultyPolicy]]:
    """A real uvicorn server in a thread on a free loopback port: (url, its policy)."""
    wrapped = FaultyPolicy(policy)
    srv = make_server(create_app(wrapped, ServeLimits(max_wait_ms=200, max_body_bytes=2**20)), port=free_port(),
                      log_level="warning")
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_until(lambda: srv.started)
    yield f"http://127.0.0.1:{srv.config.port}", wrapped
    srv.should_exit = True
    thread.join(TIMEOUT)


def frames(n: int) -> list[tuple[np.ndarray, str]]:
    return observations(n, seed=3_000_000)


def alone(policy: Any, image: np.ndarray, instruction: str) -> np.ndarray:
    """The action of one request run directly: OpenVLA's server's single call (processor, predict_action)."""
    from PIL import Image

    from prismatic_tr.models import build_prompt

    inputs = policy.processor(build_prompt(instruction), Image.fromarray(image).convert("RGB"))
    return np.asarray(policy.vla.predict_action(**inputs, unnorm_key="bridge_orig", do_sample=False))


def post(url: str, body: bytes) -> requests.Response:
    return requests.post(f"{url}/act", data=body, headers={"Content-Type": "application/json"}, timeout=TIMEOUT)


def info(url: str) -> dict[str, Any]:
    return requests.get(f"{url}/info", timeout=TIMEOUT).json()


# ---------------------------------------------------------------- OpenVLA's client, unchanged

OPENVLA_CLIENT = '''
import sys
import requests
import json_numpy
json_numpy.patch()
import numpy as np

action = requests.post(
    sys.argv[1] + "/act",
    json={"image": np.zeros((256, 256, 3), dtype=np.uint8), "instruction": "do something"}
).json()
encoded = requests.post(sys.argv[1] + "/act", json={"encoded": json_numpy.dumps(
    {"image": np.zeros((256, 256, 3), dtype=np.uint8), "instruction": "do something"})}).json()
print(json_numpy.dumps({"action": action, "encoded": json_numpy.loads(encoded)}))
'''


def test_openvla_client_code_works_unchanged(server, policy) -> None:
    """OpenVLA deploy.py's docstring client (json_numpy.patch, requests json=) and its double-encoded form get
    the action a single predict_action gives, as an ndarray."""
    url, _ = server
    out = subprocess.run([sys.executable, "-c", OPENVLA_CLIENT, url], capture_output=True, text=True,
                         timeout=TIMEOUT, check=True)
    got = json_numpy.loads(out.stdout)
    want = alone(policy, np.zeros((256, 256, 3), dtype=np.uint8), "do something")
    assert isinstance(got["action"], np.ndarray) and got["action"].shape == (7,)
    np.testing.assert_array_equal(got["action"], want)
    np.testing.assert_array_equal(got["encoded"], want)


def readme_client() -> str:
    """The client in the serving guide (docs/guides/serving.md), as a user copies it."""
    text = (ROOT / "docs" / "guides" / "serving.md").read_text()
    section = text[text.index("# Serving a policy"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```\n", start)]


def test_the_readme_client_gets_an_action(server) -> None:
    url, _ = server
    code = readme_client()
    assert len(code.strip().splitlines()) == 5 and "http://127.0.0.1:8000" in code
    code = code.replace("http://127.0.0.1:8000", url) + "\nprint(json_numpy.dumps(action))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=True)
    action = json_numpy.loads(out.stdout)
    assert isinstance(action, np.ndarray) and action.shape == (7,)


def test_health_and_info(server) -> None:
    url, _ = server
    assert requests.get(f"{url}/health", timeout=TIMEOUT).json() == {"status": "ok"}
    data = info(url)
    assert data["setting"] == "none" and data["dtype"] == "float32" and data["unnorm_keys"] == ["bridge_orig"]
    assert data["limits"]["max_batch"] == 16 and data["limits"]["max_wait_ms"] == 200
    assert data["rss_bytes"] > 0 and data["visual_tokens"] == 256


# ---------------------------------------------------------------- batching


def send_together(url: str, bodies: list[bytes]) -> list[requests.Response]:
    """Post every body at once from its own thread; the answers in order."""
    out: list[Any] = [None] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def send(i: int) -> None:
        barrier.wait()
        out[i] = post(url, bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    return out


def test_concurrent_requests_are_batched_and_each_equals_its_single_answer(server, policy) -> None:
    url, wrapped = server
    obs = frames(6)
    bodies = [json_numpy.dumps({"image": im, "instruction": text}).encode() for im, text in obs]
    singles = [json_numpy.loads(post(url, b).text) for b in bodies]
    for (im, text), single in zip(obs, singles, strict=True):
        np.testing.assert_array_equal(single, alone(policy, im, text))  # a batch of one is the single call
    before = len(wrapped.calls)
    answers = send_together(url, bodies)
    assert [a.status_code for a in answers] == [200] * len(bodies)
    assert max(wrapped.calls[before:]) > 1, wrapped.calls[before:]  # some ran as one batched call
    for answer, single in zip(answers, singles, strict=True):
        np.testing.assert_array_equal(json_numpy.loads(answer.text), single)


def test_batcher_groups_by_unnorm_key_and_isolates_a_failing_request() -> None:
    """run_guarded: one model call per unnorm_key; a failing call is retried alone, so only the bad request
    gets a ModelError."""
    calls: list[list[str]] = []

    def model(batch: list[ActRequest]) -> list[np.ndarray]:
        calls.append([r.instruction for r in batch])
        if any(r.instruction == EXPLODE for r in batch):
            raise RuntimeError("boom")
        return [np.full(7, len(r.instruction), dtype=float) for r in batch]

    img = np.zeros((16, 16, 3), np.uint8)
    reqs = [ActRequest((img,), text, key) for text, key in
            [("a", "k1"), ("bb", "k2"), (EXPLODE, "k1"), ("dddd", "k1")]]
    out = run_guarded(model, reqs)
    assert isinstance(out[2], ModelError) and len(out[2].error_id) == 12
    assert [float(out[i][0]) for i in (0, 1, 3)] == [1.0, 2.0, 4.0]
    assert calls == [["a", EXPLODE, "dddd"], ["a"], [EXPLODE], ["dddd"], ["bb"]]


def test_a_lone_request_never_waits_for_a_batch() -> None:
    """With nobody else in play, a request goes to the model at once, however long max_wait_ms is."""

    async def scenario() -> float:
        batcher = MicroBatcher(lambda batch: [np.zeros(7) for _ in batch], ServeLimits(max_wait_ms=5000))
        batcher.start()
        start = time.perf_counter()
        await asyncio.wait_for(batcher.submit(ActRequest((IMG,), "a", "k")), TIMEOUT)
        elapsed = time.perf_counter() - start
        await batcher.stop()
        return elapsed

    assert asyncio.run(scenario()) < 1.0


def test_batcher_drops_requests_whose_client_left_before_their_batch() -> None:
    ran: list[int] = []

    def model(batch: list[ActRequest]) -> list[np.ndarray]:
        ran.append(len(batch))
        time.sleep(0.2)
        return [np.zeros(7) for _ in batch]

    async def scenario() -> tuple[Any, ...]:
        batcher = MicroBatcher(model, ServeLimits(max_batch=4, max_wait_ms=0))
        batcher.start()
        img = np.zeros((16, 16, 3), np.uint8)
        first = batcher.submit(ActRequest((img,), "a", "k"))
        await asyncio.sleep(0.05)  # the first batch runs
        gone, kept = batcher.submit(ActRequest((img,), "b", "k")), batcher.submit(ActRequest((img,), "c", "k"))
        gone.cancel()
        await asyncio.wait_for(asyncio.gather(first, kept), TIMEOUT)
        await batcher.stop()
        return batcher.stats, batcher.in_flight

    stats, in_flight = asyncio.run(scenario())
    assert ran == [1, 1] and stats.dropped == 1 and stats.requests == 2 and in_flight == 0


# ---------------------------------------------------------------- bad input

IMG = np.zeros((64, 64, 3), np.uint8)


def enc(payload: dict[str, Any]) -> bytes:
    return json_numpy.dumps(payload).encode()


GOOD = {"image": IMG, "instruction": "pick up the red block"}
BAD_INPUT = {  # name -> (body, status, field named in the answer)
    "not_json": (b"{not json", 400, None),
    "not_utf8": (b"\xff\xfe", 400, None),
    "json_array": (b"[1, 2]", 400, None),
    "bad_json_numpy": (b'{"image": {"__numpy__": "!!", "dtype": "|u1", "shape": [2]}, "instruction": "x"}', 400, None),
    "encoded_with_other_field": (json.dumps({"encoded": enc(GOOD).decode(), "x": 1}).encode(), 422, "encoded"),
    "encoded_not_a_string": (json.dumps({"encoded": 5}).encode(), 422, "encoded"),
    "encoded_not_json": (json.dumps({"encoded": "{nope"}).encode(), 400, None),
    "image_as_list": (json.dumps({"image": [[[0, 0, 0]]], "instruction": "x"}).encode(), 422, "image"),
    "image_float": (enc({**GOOD, "image": IMG.astype(np.float32)}), 422, "image"),
    "image_grey": (enc({**GOOD, "image": IMG[..., 0]}), 422, "image"),
    "image_rgba": (enc({**GOOD, "image": np.zeros((64, 64, 4), np.uint8)}), 422, "image"),
    "image_too_small": (enc({**GOOD, "image": IMG[:4, :4]}), 422, "image"),
    "image_too_large": (enc({**GOOD, "image": np.zeros((1100, 16, 3), np.uint8)}), 422, "image"),
    "image_missing": (enc({"instruction": "x"}), 422, "image"),
    "image_and_full_image": (enc({**GOOD, "full_image": IMG}), 422, "image"),
    "instruction_missing": (enc({"image": IMG}), 422, "instruction"),
    "instruction_empty": (enc({**GOOD, "instruction": "  "}), 422, "instruction"),
    "instruction_not_text": (enc({**GOOD, "instruction": 7}), 422, "instruction"),
    "instruction_too_long": (enc({**GOOD, "instruction": "a" * 600}), 422, "instruction"),
    "extra_field": (enc({**GOOD, "temperature": 0.1}), 422, "temperature"),
    "unknown_unnorm_key": (enc({**GOOD, "unnorm_key": "libero_spatial"}), 422, "unnorm_key"),
    "unnorm_key_not_text": (enc({**GOOD, "unnorm_key": 3}), 422, "unnorm_key"),
    "too_many_images": (enc({**GOOD, "wrist_image": IMG}), 422, "wrist_image"),
    "proprio_on_a_non_oft_model": (enc({**GOOD, "state": np.zeros(8, np.float32)}), 422, "state"),
    "oversized_body": (enc({**GOOD, "padding": "x" * (2**20 + 1)}), 413, None),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_gets_a_4xx_naming_the_field(server, name) -> None:
    url, _ = server
    body, status, field = BAD_INPUT[name]
    answer = post(url, body)
    assert answer.status_code == status, answer.text
    data = answer.json()
    assert data["field"] == field and data["error"], data
    if field is not None:
        assert repr(field) in data["error"] and "allowed" in data["error"], data["error"]


def test_the_server_serves_on_after_every_bad_input(server) -> None:
    url, _ = server
    for body, _, _ in BAD_INPUT.values():
        post(url, body)
    assert post(url, enc(GOOD)).status_code == 200
    assert requests.get(f"{url}/act", timeout=TIMEOUT).status_code == 405  # wrong method: 4xx, never 200


def test_load_tester_bad_requests_are_each_answered_4xx(server) -> None:
    url, _ = server
    good = payloads(1, 3_000_000)[0]
    limit = info(url)["limits"]["max_body_bytes"]
    for kind in BAD_KINDS:
        if kind in PROPRIO_KINDS:  # this model takes no state: the field itself is the error
            continue
        answer = post(url, bad_body(kind, good, limit))
        assert 400 <= answer.status_code < 500, (kind, answer.status_code, answer.text[:200])
    with pytest.raises(ValueError, match="not allowed"):
        bad_body("nonsense", good, 1000)


# ---------------------------------------------------------------- model errors, disconnects


def test_a_model_error_is_a_500_with_an_id_and_spares_its_batch(server, policy, caplog) -> None:
    url, _ = server
    obs = frames(3)
    bodies = [enc({"image": im, "instruction": text}) for im, text in obs]
    with caplog.at_level("ERROR", logger="prismatic_tr.serve"):
        answers = send_together(url, [*bodies, enc({**GOOD, "instruction": EXPLODE})])
    failed = answers[-1]
    assert failed.status_code == 500 and len(failed.json()["id"]) == 12
    assert failed.json()["id"] in caplog.text and "the model exploded" in caplog.text
    for (im, text), answer in zip(obs, answers, strict=False):
        assert answer.status_code == 200
        np.testing.assert_array_equal(json_numpy.loads(answer.text), alone(policy, im, text))


def test_a_client_that_disconnects_costs_no_model_call(server) -> None:
    """While a slow batch runs, a client queues a request and hangs up: the request is dropped, never run."""
    url, wrapped = server
    port = int(url.rsplit(":", 1)[1])
    slow = threading.Thread(target=post, args=(url, enc({**GOOD, "instruction": SLOW})))
    slow.start()
    wait_until(lambda: (lambda i: i["in_flight"] == 1 and i["queued"] == 0)(info(url)), what="the slow batch")
    before = info(url)["stats"]
    body = enc(GOOD)
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(b"POST /act HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        wait_until(lambda: info(url)["queued"] == 1, what="the request to queue")
    slow.join(TIMEOUT)
    wait_until(lambda: (lambda i: i["in_flight"] == 0 and i["queued"] == 0)(info(url)), what="the batcher to drain")
    after = info(url)["stats"]
    assert after["dropped"] == before["dropped"] + 1, (before, after)
    assert after["requests"] == before["requests"] + 1  # the slow one only
    assert post(url, body).status_code == 200


# ---------------------------------------------------------------- the process: SIGTERM, command line

SLOW_SERVER = '''
import sys, time
import torch
from prismatic_tr.serve import ServeLimits, load_served_policy, run_server
torch.set_num_threads(1)
policy = load_served_policy(preset="tiny", dtype="float32", device="cpu")
predict = policy.predict
def slow(batch):
    time.sleep(%(slow)s)
    return predict(batch)
policy.predict = slow
run_server(policy, ServeLimits(max_wait_ms=0), port=int(sys.argv[1]), log_level="info")
'''


@pytest.mark.slow
def test_sigterm_answers_the_requests_in_flight_then_exits(policy) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start([sys.executable, "-c", SLOW_SERVER % {"slow": SLOW_S}, str(port)], port)
    try:
        obs = frames(3)
        answers: list[Any] = [None] * 3
        threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, post(url, enc(
            {"image": obs[i][0], "instruction": obs[i][1]})))) for i in range(3)]
        for t in threads:
            t.start()
        wait_until(lambda: info(url)["in_flight"] == 3, what="3 requests in flight")
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(TIMEOUT)
        assert proc.wait(TIMEOUT) in EXITED_ON_SIGTERM
    finally:
        proc.kill()
    log = proc.stdout.read() if proc.stdout else ""
    assert [a.status_code for a in answers] == [200] * 3, log
    for (im, text), answer in zip(obs, answers, strict=True):
        np.testing.assert_array_equal(json_numpy.loads(answer.text), alone(policy, im, text))
    assert "Shutting down" in log and "Application shutdown complete" in log, log


@pytest.mark.slow
def test_deploy_command_and_load_test_end_clean(tmp_path) -> None:
    """deploy.py serves; load_test.py (4 clients) and a short soak (a bad request every 5) lose nothing, mismatch
    nothing and get a 4xx for every bad request; the server shuts down on SIGTERM."""
    port = free_port()
    proc = start([sys.executable, "vla_scripts/deploy.py", "--preset", "tiny", "--dtype", "float32", "--port",
                  str(port), "--num_threads", "1", "--max_body_bytes", "300000", "--log_level", "warning"], port)
    url = f"http://127.0.0.1:{port}"
    try:
        reports = []
        for extra in (["--clients", "4", "--requests", "24"],
                      ["--soak", "true", "--clients", "4", "--duration_s", "4", "--bad_every", "3"]):
            out = tmp_path / "report.json"
            run = subprocess.run([sys.executable, "vla_scripts/load_test.py", "--url", url, "--distinct", "4",
                                  "--timeout_s", "30", "--output", str(out), *extra], cwd=ROOT, capture_output=True,
                                 text=True, timeout=120)
            assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
            reports.append(json.loads(out.read_text()))
        load, soak = reports
        assert load["ok"] == 24 and load["lost"] == load["mismatched"] == 0 and load["errors"] == {}
        assert load["actions_per_s"] > 0 and load["latency_ms"]["p50"] <= load["latency_ms"]["p99"]
        assert soak["bad_sent"] >= 3 and soak["bad_answered_4xx"] == soak["bad_sent"]
        assert soak["lost"] == soak["mismatched"] == 0 and soak["server_rss_mb"]["end"] > 0
        table = markdown_table(reports)
        assert table.startswith("| model | setting |") and "| tiny | `none` | float32 | 4 |" in table
        assert f"{soak['bad_sent']} of {soak['bad_sent']} bad requests answered 4xx" in table
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT) in EXITED_ON_SIGTERM
    finally:
        proc.kill()


@pytest.mark.parametrize(("name", "first_line"), [
    ("deploy", "Serve a policy with OpenVLA's deploy protocol"),
    ("load_test", "Load-test a deploy server over real HTTP"),
])
def test_help_describes_the_program_and_lists_each_option_once(name, first_line, capsys) -> None:
    import importlib

    module = importlib.import_module(f"vla_scripts.{name}")
    with pytest.raises(SystemExit) as exc:
        module.parse_config(["--help"])
    text = capsys.readouterr().out
    options = [line.split()[0] for line in text.splitlines() if line.startswith("  --")]
    assert exc.value.code == 0 and first_line in text and len(options) == len(set(options)) > 5


def test_deploy_rejects_bad_flags_before_loading(capsys) -> None:
    import importlib

    deploy = importlib.import_module("vla_scripts.deploy")
    for argv, needle in ((["--setting", "vision:nope:0.1@0.25"], "nope"), (["--max_batch", "0"], "max_batch"),
                         (["--preset", "huge"], "huge"), (["--preset", "tiny", "--adapter", "x"], "--preset"),
                         (["--vla_path", "/no/such/dir"], "/no/such/dir")):
        with pytest.raises(SystemExit) as exc:
            deploy.cli(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "deploy.py: error:" in err and needle in err, err
