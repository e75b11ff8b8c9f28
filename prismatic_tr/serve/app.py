"""The HTTP server: OpenVLA's ``POST /act`` with micro-batching, plus ``GET /health`` and ``GET /info``.

:func:`create_app` builds a FastAPI app around a policy (anything with ``predict(requests) -> actions``,
``spec`` and ``info()``, such as :class:`prismatic_tr.serve.policy.ServedPolicy`); :func:`run_server` serves it
with uvicorn, which on SIGTERM / SIGINT stops accepting connections, lets the requests in flight finish (the
batcher keeps running until they are answered) and exits. Every answer that is not an action is a 4xx or 5xx with
the JSON body of :mod:`prismatic_tr.serve.errors`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from .batcher import MicroBatcher
from .config import ServeLimits
from .errors import BAD_REQUEST, TOO_LARGE, ModelError, RequestError, body_of, error_body, new_error_id
from .protocol import encode_action, parse_request

LOG = logging.getLogger("prismatic_tr.serve")
CLIENT_GONE = 499  # written to the log only: nobody reads an answer to a client that disconnected
UNAVAILABLE = 503
DRAIN_FACTOR = 8  # an oversized body is read (and dropped) up to this many times the limit before the 413


def rss_bytes() -> int | None:
    """This process's resident memory (``VmRSS`` in ``/proc/self/status``), or None where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _json(status: int, body: bytes) -> Response:
    return Response(body, status_code=status, media_type="application/json")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body; 413 when it is over ``limit`` bytes (read and dropped up to ``DRAIN_FACTOR`` times the
    limit first, so the client, still sending, sees the answer), 400 for a bad Content-Length."""
    length = request.headers.get("content-length")
    if length is not None and not length.strip().isdigit():
        raise RequestError(BAD_REQUEST, f"Content-Length {length!r} is not a number of bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif size > DRAIN_FACTOR * limit:
            break
    if size > limit:
        shown = f"{length} bytes" if length is not None else f"over {limit} bytes"
        raise RequestError(TOO_LARGE, f"the body is {shown}; allowed: at most {limit} bytes (--max_body_bytes)")
    return b"".join(chunks)


async def wait_for_disconnect(request: Request) -> None:
    """Return when the client closes the connection (the body has been read; uvicorn then sends
    ``http.disconnect`` on close)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def answer(request: Request, batcher: MicroBatcher, policy: Any, limits: ServeLimits) -> Response:
    """The whole ``POST /act``: read, check, queue, wait for the action or the client's disconnect, encode."""
    try:
        act = parse_request(await read_body(request, limits.max_body_bytes), policy.spec, limits)
    except RequestError as err:
        return _json(*body_of(err))
    except ClientDisconnect:
        return Response(status_code=CLIENT_GONE)
    try:
        future = batcher.submit(act)
    except RuntimeError as err:
        return _json(UNAVAILABLE, error_body(str(err)))
    gone = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({future, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not future.done():  # the client went away (or this handler was cancelled): drop the request
            future.cancel()
    if future.cancelled():
        return Response(status_code=CLIENT_GONE)
    try:
        action = future.result()
    except ModelError as err:
        return _json(*body_of(err))
    return Response(encode_action(action, act.encoded), media_type="application/json")


def create_app(policy: Any, limits: ServeLimits | None = None) -> FastAPI:
    """The FastAPI app serving ``policy``; its micro-batcher runs from startup to shutdown."""
    limits = limits or ServeLimits()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher = MicroBatcher(policy.predict, limits)
        batcher.start()
        state.update(batcher=batcher, started=time.time(), rss_start=rss_bytes())
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="prismatic_tr: OpenVLA deploy server", lifespan=lifespan)

    @app.post("/act")
    async def act(request: Request) -> Response:
        return await answer(request, state["batcher"], policy, limits)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        batcher: MicroBatcher = state["batcher"]
        return {**policy.info(), "limits": limits.to_dict(), "stats": batcher.stats.as_dict(),
                "queued": batcher.queued, "in_flight": batcher.in_flight, "pid": os.getpid(), "rss_bytes": rss_bytes(),
                "rss_bytes_at_start": state["rss_start"], "uptime_s": round(time.time() - state["started"], 3)}

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        error_id = new_error_id()
        LOG.error("unexpected error %s on %s %s", error_id, request.method, request.url.path, exc_info=exc)
        return _json(500, error_body(f"internal error; the server log has it under id {error_id}", None, error_id))

    return app


def make_server(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> Any:
    """A ``uvicorn.Server`` for ``app`` (``.run()`` blocks; in the main thread it handles SIGTERM / SIGINT by
    finishing the requests in flight, then exiting)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=None)
    return uvicorn.Server(config)


def run_server(policy: Any, limits: ServeLimits | None = None, host: str = "127.0.0.1", port: int = 8000,
               log_level: str = "info") -> None:
    """Serve ``policy`` until SIGTERM / SIGINT."""
    make_server(create_app(policy, limits), host, port, log_level).run()
