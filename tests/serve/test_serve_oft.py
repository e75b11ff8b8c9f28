"""Serving an OpenVLA-OFT checkpoint (``deploy.py --vla_path``, OFT's layout, loaded natively) on a free loopback port.

An OFT client's request (``full_image``, ``wrist_image``, the raw ``state``, ``instruction``) gets the action chunk
as a list of per-step arrays, equal to the native OFT model run directly the way OFT's ``get_vla_action`` prepares
it (each camera through the processor, pixel values concatenated on the channel axis, the state normalised with
the key's proprio bounds and clipped); concurrent requests are batched and each answer equals its request served
alone; missing cameras or state, a state of the wrong size and one camera too many get 422 naming the field; a
reduction setting serves the reduced model's chunk; the load tester speaks OFT's form to it and ends clean.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
json_numpy = pytest.importorskip("json_numpy")
requests = pytest.importorskip("requests")

from helpers.server import EXITED_ON_SIGTERM, TIMEOUT, free_port, start  # noqa: E402

from prismatic_tr.serve import ActRequest, load_served_policy  # noqa: E402
from prismatic_tr.serve.loadtest import BAD_KINDS, bad_body, payloads  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEY = "oft_tiny"
Q01 = [-0.5 * (1 + i / 10) for i in range(8)]
Q99 = [0.5 * (1 + i / 5) for i in range(8)]


def statistics() -> dict[str, Any]:
    """dataset_statistics.json of one dataset: action bounds (last dimension unmasked) and proprio bounds."""
    action = {"q01": [-0.3 * (1 + i / 10) for i in range(7)], "q99": [0.3 * (1 + i / 5) for i in range(7)],
              "mask": [True] * 6 + [False]}
    action.update(min=[2 * v for v in action["q01"]], max=[2 * v for v in action["q99"]])
    proprio = {"q01": Q01, "q99": Q99, "min": [2 * v for v in Q01], "max": [2 * v for v in Q99]}
    return {KEY: {"action": action, "proprio": proprio, "num_transitions": 10, "num_trajectories": 1}}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny two-image OFT checkpoint with proprio and the L1 head, saved natively in OFT's layout."""
    from prismatic_tr.models import build_processor, build_vla

    vla = build_vla("tiny-oft", seed=3)
    vla.norm_stats = vla.config.norm_stats = statistics()
    out = tmp_path_factory.mktemp("oft_ckpt")
    vla.save_pretrained(out)
    build_processor(vla.config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def served(checkpoint: Path) -> Iterator[tuple[str, Any]]:
    """deploy.py serving the checkpoint (a subprocess), and the same checkpoint loaded here: (url, policy)."""
    port = free_port()
    proc = start([sys.executable, "vla_scripts/deploy.py", "--vla_path", str(checkpoint), "--dtype", "float32",
                  "--port", str(port), "--num_threads", "1", "--max_wait_ms", "300", "--log_level", "warning"], port)
    try:
        yield f"http://127.0.0.1:{port}", load_served_policy(vla_path=str(checkpoint), dtype="float32", device="cpu")
    finally:
        proc.terminate()
        assert proc.wait(TIMEOUT) in EXITED_ON_SIGTERM
        proc.kill()


def post(url: str, payload: dict[str, Any] | bytes) -> requests.Response:
    body = payload if isinstance(payload, bytes) else json_numpy.dumps(payload).encode()
    return requests.post(f"{url}/act", data=body, headers={"Content-Type": "application/json"}, timeout=TIMEOUT)


def direct(policy: Any, payload: dict[str, Any]) -> np.ndarray:
    """The chunk of the native OFT model called directly as OFT's client prepares a request (own arithmetic)."""
    import torch
    from PIL import Image

    from prismatic_tr.models import build_prompt

    prompt = build_prompt(payload["instruction"])
    cams = [payload["full_image"], *[payload[k] for k in sorted(payload) if "wrist" in k]]
    per_cam = [policy.processor(prompt, Image.fromarray(c).convert("RGB")) for c in cams]
    state = np.asarray(payload["state"], dtype=np.float64)
    low, high = np.array(Q01), np.array(Q99)
    proprio = np.clip(2 * (state - low) / (high - low + 1e-8) - 1, -1, 1).astype(np.float32)
    return np.asarray(policy.vla.predict_action(
        input_ids=per_cam[0]["input_ids"], attention_mask=per_cam[0]["attention_mask"],
        pixel_values=torch.cat([c["pixel_values"] for c in per_cam], dim=1), proprio=proprio[None],
        unnorm_key=KEY)[0])


def requests_(n: int) -> list[dict[str, Any]]:
    out = payloads(n, 3_000_000, images=2, proprio_dim=8)
    out[0]["state"] = out[0]["state"] * 3  # outside the bounds: clipped as OFT does
    return out


@pytest.mark.slow
def test_info_describes_the_oft_model(served) -> None:
    url, _ = served
    info = requests.get(f"{url}/info", timeout=TIMEOUT).json()
    assert (info["min_images"], info["max_images"], info["proprio_dim"]) == (2, 2, 8)
    assert info["answer"]["kind"] == "openvla-oft" and (info["answer"]["chunk"], info["answer"]["action_dim"]) == (8, 7)
    assert info["unnorm_keys"] == [KEY]


def test_an_oft_client_gets_the_chunk_as_a_list_of_steps(served) -> None:
    url, policy = served
    payload = requests_(1)[0]
    answer = post(url, payload)
    assert answer.status_code == 200, answer.text[:300]
    steps = json.loads(answer.text, object_hook=json_numpy.object_hook)
    assert isinstance(steps, list) and len(steps) == 8 and all(s.shape == (7,) for s in steps)
    np.testing.assert_allclose(np.stack(steps), direct(policy, payload), atol=1e-5)
    encoded = post(url, {"encoded": json_numpy.dumps(payload)})
    np.testing.assert_allclose(np.stack(json_numpy.loads(encoded.json())), np.stack(steps), atol=0)


def test_concurrent_oft_requests_are_batched_and_each_equals_its_single_answer(served) -> None:
    url, policy = served
    batch = requests_(4)
    before = requests.get(f"{url}/info", timeout=TIMEOUT).json()["stats"]
    answers: list[Any] = [None] * len(batch)
    threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, post(url, batch[i])))
               for i in range(len(batch))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    after = requests.get(f"{url}/info", timeout=TIMEOUT).json()["stats"]
    assert after["batches"] - before["batches"] < len(batch)  # at least two of them shared a batch
    chunks = [np.asarray(json_numpy.loads(a.text)) for a in answers]
    for payload, chunk in zip(batch, chunks, strict=True):
        np.testing.assert_allclose(chunk, direct(policy, payload), atol=1e-5)
    assert len({c.round(5).tobytes() for c in chunks}) == len(batch)  # distinct requests, distinct answers


@pytest.mark.parametrize(("change", "field"), [
    (lambda p: {k: v for k, v in p.items() if k != "wrist_image"}, "wrist_image"),
    (lambda p: {k: v for k, v in p.items() if k != "state"}, "state"),
    (lambda p: {**p, "state": p["state"][:7]}, "state"),
    (lambda p: {**p, "state": np.full(8, np.nan, np.float32)}, "state"),
    (lambda p: {**p, "wrist_image_2": p["full_image"]}, "wrist_image_2"),
    (lambda p: {**p, "image": p["full_image"]}, "image"),
], ids=["no-wrist", "no-state", "short-state", "nan-state", "three-images", "image-and-full_image"])
def test_bad_oft_input_gets_a_422_naming_the_field(served, change, field) -> None:
    url, _ = served
    answer = post(url, change(requests_(1)[0]))
    assert answer.status_code == 422 and answer.json()["field"] == field, answer.text[:300]


def test_every_load_tester_bad_kind_is_a_4xx(served) -> None:
    url, _ = served
    good = requests_(1)[0]
    for kind in BAD_KINDS:
        answer = post(url, bad_body(kind, good, 8 * 2**20, max_images=2))
        assert 400 <= answer.status_code < 500, (kind, answer.status_code)


def test_a_reduction_setting_serves_the_reduced_chunk(checkpoint) -> None:
    policy = load_served_policy(vla_path=str(checkpoint), dtype="float32", device="cpu",
                                setting="vision:diverse:0.25@0.25")
    assert policy.setting == "vision:diverse:0.25@0.25" and policy.info()["visual_tokens"] == 2 * 64
    payload = requests_(1)[0]
    act = ActRequest((payload["full_image"], payload["wrist_image"]), payload["instruction"], KEY, payload["state"])
    np.testing.assert_allclose(policy.predict([act])[0], direct(policy, payload), atol=1e-5)


def test_load_tester_speaks_ofts_form_and_ends_clean(served, tmp_path) -> None:
    url, _ = served
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, "vla_scripts/load_test.py", "--url", url, "--distinct", "3",
                          "--timeout_s", "30", "--output", str(out), "--soak", "true", "--clients", "3",
                          "--duration_s", "4", "--bad_every", "3"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["ok"] > 0 and report["lost"] == report["mismatched"] == 0 and report["errors"] == {}
    assert report["bad_sent"] >= 2 and report["bad_answered_4xx"] == report["bad_sent"]
    assert report["distinct_reference_actions"] == 3
