"""Load-test a server that speaks OpenVLA's deploy protocol: real HTTP, N concurrent clients, bounded.

:func:`run_load_test` first sends each of ``candidates`` observations (tabletop frames of different episodes, so
different images; default ``distinct``) alone, one after another, and keeps each answer as that observation's
reference. A mixed-up answer (one meant for another request) is caught only where the two references differ, so the
load uses at most ``distinct`` observations whose references differ pairwise by more than ``atol``
(:func:`distinguishable`); then ``clients`` threads send them round-robin, each waiting for its answer before
sending the next, until ``requests`` have been sent or ``duration_s`` has passed (each request has its own
``timeout_s``). Every answer is checked against its own reference: a response for another request is caught as
``mismatched``. A model that gives every observation the same action (a random-weight preset such as cpu-bench)
leaves nothing to tell apart: the load then uses the first ``distinct`` observations and the report says
``mixup_detectable: false`` (``require_distinct`` refuses such a run instead). With ``bad_every`` = K (the soak),
every K-th request is a malformed one from :data:`BAD_KINDS` and must be answered 4xx.

The result (:func:`summarize`): actions per second, latency percentiles, errors, lost requests (no answer),
mismatches, bad requests answered 4xx or not, and the server's resident memory before and after (``/info``).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import json_numpy
import numpy as np

BAD_KINDS = ("not_json", "float_image", "grey_image", "tiny_image", "no_instruction", "extra_field",
             "unknown_unnorm_key", "too_many_images", "oversized", "bad_state")
PROPRIO_KINDS = ("bad_state",)  # sent only to a model that takes a proprio state
JSON_HEADERS = {"Content-Type": "application/json"}
SERVER_KEYS = ("model", "setting", "cut", "dtype", "dtype_reason", "device", "visual_tokens", "limits", "pid")


@dataclass(frozen=True)
class LoadTestConfig:
    """What to send: ``clients`` threads, at most ``requests`` requests and ``duration_s`` seconds in all, over at
    most ``distinct`` observations picked from ``candidates`` (default ``distinct``) so that their references differ;
    ``require_distinct``: refuse a run where fewer than two do (a mix-up could not be detected)."""

    url: str = "http://127.0.0.1:8000"
    clients: int = 4
    requests: int = 200
    duration_s: float = 60.0
    distinct: int = 32
    timeout_s: float = 120.0
    atol: float = 1e-6
    bad_every: int = 0
    unnorm_key: str | None = None
    seed: int = 3_000_000
    candidates: int | None = None
    require_distinct: bool = False

    def __post_init__(self) -> None:
        for name in ("clients", "requests", "distinct"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; use an integer >= 1")
        c = self.candidates
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < self.distinct):
            raise ValueError(f"candidates={c!r} is not allowed; use None (= distinct) or an integer >= distinct "
                             f"({self.distinct})")
        if isinstance(self.bad_every, bool) or not isinstance(self.bad_every, int) or self.bad_every < 0:
            raise ValueError(f"bad_every={self.bad_every!r} is not allowed; use 0 (none) or an integer >= 1")
        for name in ("duration_s", "timeout_s"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is not allowed; use a number of seconds > 0")
        if not self.url.startswith("http://"):
            raise ValueError(f"url={self.url!r} is not allowed; use http://host:port")


@dataclass
class Tally:
    """What the clients saw, filled in under a lock."""

    latencies_s: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    mismatched: int = 0
    max_abs_diff: float = 0.0
    bad_sent: Counter = field(default_factory=Counter)
    bad_not_4xx: list[str] = field(default_factory=list)


def observations(n: int, seed: int) -> list[tuple[np.ndarray, str]]:
    """``n`` (image (224, 224, 3) uint8, instruction) pairs: the first frame of tabletop episodes ``seed`` ...
    (a different scene each, so different images)."""
    from prismatic_tr.envs import make_episode

    out = []
    for i in range(n):
        obs = make_episode(seed + i).reset()
        out.append((obs.image, obs.instruction))
    return out


def payloads(n: int, seed: int, images: int = 1, proprio_dim: int | None = None,
             unnorm_key: str | None = None) -> list[dict[str, Any]]:
    """``n`` distinct requests. One image: OpenVLA's payload (``image``, ``instruction``); an OpenVLA-OFT model's
    (``images`` > 1 or a proprio): OFT's (``full_image``, ``wrist_image``, ``wrist_image_2`` ..., ``state``).
    The extra cameras show other episodes' scenes (the tabletop task has one camera) and the states are drawn
    from ``seed``, so every request differs from every other in every field the model reads."""
    obs = observations(n * images, seed)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        image, instruction = obs[i]
        payload: dict[str, Any] = {"full_image" if images > 1 or proprio_dim else "image": image,
                                   "instruction": instruction}
        for j in range(1, images):
            payload["wrist_image" + (f"_{j}" if j > 1 else "")] = obs[j * n + i][0]
        if proprio_dim:
            payload["state"] = rng.uniform(-1.0, 1.0, proprio_dim).astype(np.float32)
        if unnorm_key is not None:
            payload["unnorm_key"] = unnorm_key
        out.append(payload)
    return out


def bad_body(kind: str, good: dict[str, Any], max_body_bytes: int, max_images: int = 1) -> bytes:
    """A malformed variant of the request ``good`` (a payload of :func:`payloads`) of ``kind`` (one of
    :data:`BAD_KINDS`; ``too_many_images`` adds wrist images up to ``max_images`` + 1); the server must answer 4xx."""
    field = "full_image" if "full_image" in good else "image"
    image = good[field]
    bodies: dict[str, Callable[[], Any]] = {
        "not_json": lambda: b"{this is not json",
        "float_image": lambda: {**good, field: image.astype(np.float32) / 255},
        "grey_image": lambda: {**good, field: image[..., 0]},
        "tiny_image": lambda: {**good, field: image[:4, :4]},
        "no_instruction": lambda: {k: v for k, v in good.items() if k != "instruction"},
        "extra_field": lambda: {**good, "temperature": 0.5},
        "unknown_unnorm_key": lambda: {**good, "unnorm_key": "no_such_dataset"},
        "too_many_images": lambda: {**{k: v for k, v in good.items() if "wrist" not in k},
                                    **{f"wrist_image_{j}": image for j in range(1, max_images + 1)}},
        "oversized": lambda: {**good, "padding": "x" * (max_body_bytes + 1)},
        "bad_state": lambda: {**good, "state": np.zeros(len(good.get("state", ())) + 1, dtype=np.float32)},
    }
    if kind not in bodies:
        raise ValueError(f"bad request kind {kind!r} is not allowed; use one of {BAD_KINDS}")
    body = bodies[kind]()
    return body if isinstance(body, bytes) else json_numpy.dumps(body).encode()


def decode_action(text: str) -> np.ndarray:
    """An answer body -> the action array."""
    return np.asarray(json.loads(text, object_hook=json_numpy.object_hook))


def server_info(url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """``GET /info`` of the server."""
    import requests

    response = requests.get(f"{url}/info", timeout=timeout_s)
    response.raise_for_status()
    return response.json()


def reference_actions(cfg: LoadTestConfig, bodies: list[bytes]) -> list[np.ndarray]:
    """Each body's answer when it is the only request in flight (sent one after another)."""
    import requests

    out = []
    with requests.Session() as session:
        for i, body in enumerate(bodies):
            response = session.post(f"{cfg.url}/act", data=body, headers=JSON_HEADERS, timeout=cfg.timeout_s)
            if response.status_code != 200:
                raise RuntimeError(f"reference request {i} got HTTP {response.status_code}: {response.text[:300]}")
            out.append(decode_action(response.text))
    return out


def distinguishable(refs: list[np.ndarray], limit: int, atol: float) -> list[int]:
    """Indices of at most ``limit`` references (each (A,) or (chunk, A)) that differ pairwise by more than ``atol``
    (max |difference|, or in shape): the first of each group of equal ones, in order. Among the observations they
    belong to, an answer meant for another request never passes as the right one."""
    kept: list[int] = []
    for i, ref in enumerate(refs):
        if len(kept) == limit:
            break
        if all(ref.shape != refs[j].shape or float(np.max(np.abs(ref - refs[j]))) > atol for j in kept):
            kept.append(i)
    return kept


def pick_observations(cfg: LoadTestConfig, refs: list[np.ndarray]) -> list[int]:
    """Indices of the probed observations (``refs``: their references) that the load sends: the
    :func:`distinguishable` ones when at least two are, else the first ``cfg.distinct``, among which a mix-up
    cannot be detected (ValueError with ``cfg.require_distinct``)."""
    kept = distinguishable(refs, cfg.distinct, cfg.atol)
    if len(kept) >= 2:
        return kept
    if cfg.require_distinct:
        raise ValueError(f"require_distinct=True, but the server gave all {len(refs)} probed observations the same "
                         f"action (within atol={cfg.atol}), so a mixed-up answer could not be detected; probe more "
                         "(candidates) or serve a model whose actions depend on what it sees")
    return list(range(min(cfg.distinct, len(refs))))


def _send_one(session: Any, cfg: LoadTestConfig, index: int, good: list[bytes], refs: list[np.ndarray],
              bad: Callable[[int], tuple[str, bytes]] | None, tally: Tally, lock: threading.Lock) -> None:
    """Send request ``index`` (a bad one every ``bad_every``) and record what came back."""
    is_bad = bad is not None and cfg.bad_every > 0 and (index + 1) % cfg.bad_every == 0
    kind, body = bad(index) if is_bad and bad is not None else ("", good[index % len(good)])
    start = time.perf_counter()
    try:
        response = session.post(f"{cfg.url}/act", data=body, headers=JSON_HEADERS, timeout=cfg.timeout_s)
    except Exception as err:  # noqa: BLE001 (a lost request is a result, not a crash of the tester)
        with lock:
            tally.lost.append(f"request {index}{' (' + kind + ')' if kind else ''}: {type(err).__name__}: {err}")
        return
    elapsed = time.perf_counter() - start
    with lock:
        if is_bad:
            tally.bad_sent[kind] += 1
            if not 400 <= response.status_code < 500:
                tally.bad_not_4xx.append(f"{kind}: HTTP {response.status_code}")
            return
        tally.statuses[response.status_code] += 1
        if response.status_code != 200:
            return
        tally.latencies_s.append(elapsed)
    action = decode_action(response.text)
    ref = refs[index % len(refs)]
    diff = float(np.max(np.abs(action - ref))) if action.shape == ref.shape else float("inf")
    with lock:
        tally.max_abs_diff = max(tally.max_abs_diff, diff)
        tally.mismatched += int(not diff <= cfg.atol)


def run_clients(cfg: LoadTestConfig, good: list[bytes], refs: list[np.ndarray],
                bad: Callable[[int], tuple[str, bytes]] | None) -> tuple[Tally, float]:
    """``cfg.clients`` threads sending until ``cfg.requests`` are sent or ``cfg.duration_s`` passed; (tally,
    wall seconds)."""
    import requests

    tally, lock, counter = Tally(), threading.Lock(), itertools.count()
    deadline = time.perf_counter() + cfg.duration_s

    def client() -> None:
        with requests.Session() as session:
            while time.perf_counter() < deadline:
                with lock:
                    index = next(counter)
                if index >= cfg.requests:
                    return
                _send_one(session, cfg, index, good, refs, bad, tally, lock)

    threads = [threading.Thread(target=client, name=f"client-{i}", daemon=True) for i in range(cfg.clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(cfg.duration_s + cfg.timeout_s + 10)
    return tally, time.perf_counter() - start


def summarize(cfg: LoadTestConfig, tally: Tally, wall_s: float, refs: list[np.ndarray],
              before: dict[str, Any], after: dict[str, Any], probed: int | None = None) -> dict[str, Any]:
    """The report: throughput, latency percentiles (ms), errors, lost, mismatched (and whether a mix-up among the
    ``refs`` sent could be detected at all: ``mixup_detectable``), bad answers, memory. ``probed``: observations
    sent alone to pick ``refs`` from (default: as many as ``refs``)."""
    lat = np.asarray(tally.latencies_s) * 1000
    pct = {f"p{q}": round(float(np.percentile(lat, q)), 1) for q in (50, 95, 99)} if lat.size else {}
    errors = {str(k): v for k, v in sorted(tally.statuses.items()) if k != 200}
    stats0, stats1 = before.get("stats", {}), after.get("stats", {})
    batches = (stats1.get("batches", 0) or 0) - (stats0.get("batches", 0) or 0)
    served = (stats1.get("requests", 0) or 0) - (stats0.get("requests", 0) or 0)
    return {
        "model": after.get("model"), "setting": after.get("setting"), "dtype": after.get("dtype"),
        "clients": cfg.clients, "ok": int(lat.size), "errors": errors, "lost": len(tally.lost),
        "lost_examples": tally.lost[:5], "mismatched": tally.mismatched, "max_abs_diff": tally.max_abs_diff,
        "distinct_observations": len(refs),
        "distinct_reference_actions": len({r.tobytes() for r in refs}),
        "probed_observations": len(refs) if probed is None else probed,
        "mixup_detectable": len(refs) >= 2 and len(distinguishable(refs, len(refs), cfg.atol)) == len(refs),
        "wall_s": round(wall_s, 2), "actions_per_s": round(lat.size / wall_s, 3) if wall_s > 0 else None,
        "latency_ms": {**pct, "mean": round(float(lat.mean()), 1) if lat.size else None},
        "server_mean_batch_size": round(served / batches, 2) if batches else None,
        "bad_sent": sum(tally.bad_sent.values()), "bad_by_kind": dict(tally.bad_sent),
        "bad_answered_4xx": sum(tally.bad_sent.values()) - len(tally.bad_not_4xx),
        "bad_not_4xx": tally.bad_not_4xx[:20],
        "server_rss_mb": {"server_start": _mb(after.get("rss_bytes_at_start")), "start": _mb(before.get("rss_bytes")),
                          "end": _mb(after.get("rss_bytes"))},
        "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "server": {k: after.get(k) for k in SERVER_KEYS},
        # the timings' machine: the server's (/info), or this one's when the server does not say
        "machine": after.get("machine") or _this_machine(),
    }


def _this_machine() -> dict[str, Any]:
    from prismatic_tr.bench.measure.devices import machine_info  # torch only when the server does not say

    return machine_info()


def _mb(value: Any) -> float | None:
    return round(value / 2**20, 1) if isinstance(value, (int, float)) else None


def run_load_test(cfg: LoadTestConfig) -> dict[str, Any]:
    """References alone, then the load (and the bad requests of a soak); the :func:`summarize` report. The
    requests take the form the server's ``/info`` asks for (OpenVLA's one image, or OFT's images and state)."""
    info = server_info(cfg.url)
    images, proprio = int(info.get("min_images", 1)), info.get("proprio_dim")
    probed = payloads(cfg.candidates or cfg.distinct, cfg.seed, images, proprio, cfg.unnorm_key)
    probed_bodies = [json_numpy.dumps(p).encode() for p in probed]
    probed_refs = reference_actions(cfg, probed_bodies)
    picked = pick_observations(cfg, probed_refs)
    requests_ = [probed[i] for i in picked]
    good, refs = [probed_bodies[i] for i in picked], [probed_refs[i] for i in picked]
    limit = int(info.get("limits", {}).get("max_body_bytes", 8 * 2**20))
    kinds = [k for k in BAD_KINDS if proprio or k not in PROPRIO_KINDS]
    bad_cache: dict[str, bytes] = {}

    def bad(index: int) -> tuple[str, bytes]:
        kind = kinds[(index // max(cfg.bad_every, 1)) % len(kinds)]
        if kind not in bad_cache:
            bad_cache[kind] = bad_body(kind, requests_[0], limit, int(info.get("max_images", 1)))
        return kind, bad_cache[kind]

    before = server_info(cfg.url)
    tally, wall = run_clients(cfg, good, refs, bad if cfg.bad_every else None)
    return summarize(cfg, tally, wall, refs, before, server_info(cfg.url), probed=len(probed))
