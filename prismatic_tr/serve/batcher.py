"""Dynamic micro-batching: requests that arrive together run as one batched model call.

Requests queue in the event loop; one task takes them in batches of at most ``max_batch`` and runs each batch in
a single worker thread (the event loop keeps accepting and checking requests meanwhile). Once the model is free
and a request is queued, the batcher waits at most ``max_wait_ms`` for more, and only while fewer are queued than
were in the server when the previous batch ended (its requests plus those queued then: the clients in play). So
a lone client's batches of one start at once, as a plain call would, and N clients that each await their answer
are served N at a time. Requests whose client went away before their batch started are dropped. Within a batch,
requests are grouped by ``unnorm_key`` (one model call per group); when a call raises, each of its requests is
run again alone, so one bad request gets its own 500 (:class:`ModelError`, logged with an id) and the others
their answers.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import ServeLimits
from .errors import ModelError, new_error_id
from .protocol import ActRequest

LOG = logging.getLogger("prismatic_tr.serve")
RunBatch = Callable[[Sequence[ActRequest]], list[np.ndarray]]


@dataclass
class Job:
    """One queued request, the future its handler awaits and when it arrived (``time.monotonic``)."""

    request: ActRequest
    future: asyncio.Future
    arrived: float


@dataclass
class BatchStats:
    """Counters for ``GET /info``: requests answered, model errors, dropped (client gone), batch sizes."""

    requests: int = 0
    model_errors: int = 0
    dropped: int = 0
    batches: int = 0
    batch_sizes: collections.Counter = field(default_factory=collections.Counter)

    def as_dict(self) -> dict[str, Any]:
        mean = sum(k * v for k, v in self.batch_sizes.items()) / self.batches if self.batches else None
        return {"requests": self.requests, "model_errors": self.model_errors, "dropped": self.dropped,
                "batches": self.batches, "mean_batch_size": mean,
                "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())}}


def run_guarded(run_batch: RunBatch, requests: Sequence[ActRequest]) -> list[np.ndarray | ModelError]:
    """``run_batch`` per ``unnorm_key`` group; a failed group is run again one request at a time. Each request
    gets its action or a :class:`ModelError` (logged with its id and traceback). Runs in the worker thread."""
    out: list[np.ndarray | ModelError | None] = [None] * len(requests)
    groups: dict[str, list[int]] = {}
    for i, request in enumerate(requests):
        groups.setdefault(request.unnorm_key, []).append(i)
    for indices in groups.values():
        try:
            actions = run_batch([requests[i] for i in indices])
            for i, action in zip(indices, actions, strict=True):
                out[i] = action
            continue
        except Exception:  # noqa: BLE001 (retried alone below, so only the failing request gets the error)
            if len(indices) == 1:
                out[indices[0]] = _model_error()
                continue
        for i in indices:
            try:
                out[i] = run_batch([requests[i]])[0]
            except Exception:  # noqa: BLE001
                out[i] = _model_error()
    return out  # type: ignore[return-value]


def _model_error() -> ModelError:
    """A :class:`ModelError` for the exception being handled, logged with its traceback."""
    error_id = new_error_id()
    LOG.exception("model error %s", error_id)
    return ModelError(error_id, sys.exc_info()[1] or RuntimeError("unknown"))


class MicroBatcher:
    """Queue requests and run them in batches; create, :meth:`start` and :meth:`stop` inside the event loop."""

    def __init__(self, run_batch: RunBatch, limits: ServeLimits) -> None:
        self.run_batch = run_batch
        self.limits = limits
        self.stats = BatchStats()
        self._pending: collections.deque[Job] = collections.deque()
        self._wake = asyncio.Event()
        self._closing = False
        self._in_play = 1  # requests in the server when the last batch ended: how many to wait for
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self._task: asyncio.Task | None = None
        self._in_flight = 0

    @property
    def queued(self) -> int:
        """Requests waiting for a batch."""
        return len(self._pending)

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet answered (queued or in the running batch)."""
        return self._in_flight

    def _answered(self, _: asyncio.Future) -> None:
        self._in_flight -= 1

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="micro-batcher")

    async def stop(self) -> None:
        """Answer every queued request, then stop the loop and the worker thread."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        self._executor.shutdown(wait=True)

    def submit(self, request: ActRequest) -> asyncio.Future:
        """Queue ``request``; the future gives its action or raises :class:`ModelError`. Cancel the future to
        drop a request whose client went away (it is skipped unless its batch already started)."""
        if self._closing:
            raise RuntimeError("the server is shutting down")
        future = asyncio.get_running_loop().create_future()
        self._in_flight += 1
        future.add_done_callback(self._answered)
        self._pending.append(Job(request, future, time.monotonic()))
        self._wake.set()
        return future

    def _purge(self) -> None:
        """Drop queued requests whose client went away (their future is cancelled)."""
        live = [job for job in self._pending if not job.future.done()]
        self.stats.dropped += len(self._pending) - len(live)
        self._pending = collections.deque(live)

    async def _next_batch(self) -> list[Job]:
        """Wait for a request, then up to ``max_wait_ms`` while fewer are queued than were in play last time."""
        self._purge()
        while not self._pending:
            if self._closing:
                return []
            self._wake.clear()
            await self._wake.wait()
            self._purge()
        target = min(self.limits.max_batch, self._in_play)
        deadline = time.monotonic() + self.limits.max_wait_ms / 1000
        while len(self._pending) < target and not self._closing:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                break
            self._purge()
        batch = [self._pending.popleft() for _ in range(min(self.limits.max_batch, len(self._pending)))]
        live = [job for job in batch if not job.future.done()]
        self.stats.dropped += len(batch) - len(live)
        return live

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if not batch:
                if self._closing and not self._pending:
                    return
                continue
            results = await loop.run_in_executor(self._executor, run_guarded, self.run_batch,
                                                 [job.request for job in batch])
            self._in_play = len(batch) + len(self._pending)
            self.stats.batches += 1
            self.stats.batch_sizes[len(batch)] += 1
            for job, result in zip(batch, results, strict=True):
                if isinstance(result, ModelError):
                    self.stats.model_errors += 1
                else:
                    self.stats.requests += 1
                if job.future.done():  # the client went away while its batch ran
                    continue
                if isinstance(result, ModelError):
                    job.future.set_exception(result)
                else:
                    job.future.set_result(result)
