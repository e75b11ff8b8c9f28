"""Starting a real server for a test: a free loopback port, waiting (bounded) until it answers, its process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60
# uvicorn >= 0.29 re-raises the signal after its graceful shutdown (status -15); older versions exit 0
EXITED_ON_SIGTERM = (0, -signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Any, timeout: float = TIMEOUT, what: str = "the server") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def start(cmd: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_until(lambda: proc.poll() is None and requests.get(f"http://127.0.0.1:{port}/health",
                                                                 timeout=5).status_code == 200)
    except AssertionError:
        proc.kill()
        raise AssertionError(proc.communicate()[0][-3000:]) from None
    return proc
