"""Mean GPU board power during a block of code, sampled with pynvml in a background thread.

>>> with PowerMonitor("cuda:0") as power:
...     run_timed_loop()
>>> power.mean_watts          # None on a CPU, or when pynvml is missing / unsupported
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from prismatic_tr.bench.timing import _as_device


class PowerMonitor:
    """Context manager sampling ``nvmlDeviceGetPowerUsage`` every ``interval_s`` while the block runs."""

    def __init__(self, device: torch.device | str | None, interval_s: float = 0.02) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s={interval_s!r} must be > 0")
        self.device = _as_device(device)
        self.interval_s = interval_s
        self.samples_w: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handle: Any = None

    def _open(self) -> bool:
        if self.device.type != "cuda" or not torch.cuda.is_available():
            return False
        try:
            import pynvml  # optional dependency: pip install prismatic_tr[gpu]

            pynvml.nvmlInit()
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetPowerUsage(self._handle)
        except Exception:  # noqa: BLE001 - any NVML failure just means "no power reading"
            return False
        self._nvml = pynvml
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples_w.append(self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0)
            except Exception:  # noqa: BLE001
                return
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PowerMonitor:
        self.samples_w.clear()
        if self._open():
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    @property
    def mean_watts(self) -> float | None:
        """Mean of the samples in W, or None when nothing was sampled."""
        return sum(self.samples_w) / len(self.samples_w) if self.samples_w else None
