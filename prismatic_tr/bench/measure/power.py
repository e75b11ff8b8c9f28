"""Mean GPU board power during a block of code, sampled with pynvml in a background thread.

>>> with PowerMonitor("cuda:0") as power:
...     run_timed_loop()
>>> power.mean_watts          # None on a CPU, or when pynvml is missing / unsupported

torch numbers the devices it can see (``CUDA_VISIBLE_DEVICES``), NVML numbers every device on the machine:
under ``CUDA_VISIBLE_DEVICES=2,3`` torch's ``cuda:0`` is NVML's device 2. The monitor finds the NVML
device by the UUID torch reports (torch >= 2.3), else through ``CUDA_VISIBLE_DEVICES``
(:func:`nvml_target`); it reads nothing rather than another device's power when neither tells.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import torch

from prismatic_tr.bench.measure.devices import as_device


def nvml_target(torch_index: int, cuda_visible_devices: str | None) -> int | str | None:
    """The NVML device behind torch's CUDA device ``torch_index``, from a ``CUDA_VISIBLE_DEVICES`` value.

    Returns an NVML index (int), a UUID or UUID prefix (str, ``"GPU-..."``) to match against NVML's UUIDs,
    or None when ``torch_index`` is not visible or is a MIG instance (NVML reports power per physical GPU).
    ``None`` (variable unset) means every device, in NVML's order. As CUDA does, parsing stops at the
    first entry that is neither a non-negative integer nor a UUID. Integer entries follow CUDA's device
    order, which is NVML's (PCI bus) order under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and on machines with
    one GPU model; UUID entries are exact.
    """
    if cuda_visible_devices is None:
        return torch_index
    visible: list[int | str] = []
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        if entry.isdigit():
            visible.append(int(entry))
        elif entry.startswith(("GPU-", "MIG-")):
            visible.append(entry)
        else:
            break
    if not 0 <= torch_index < len(visible):
        return None
    target = visible[torch_index]
    return None if isinstance(target, str) and target.startswith("MIG-") else target


def match_uuid(target: str, uuids: Sequence[str]) -> int | None:
    """Index of the one UUID in ``uuids`` that starts with ``target``; None for no match or an ambiguous one."""
    hits = [i for i, u in enumerate(uuids) if u.startswith(target)]
    return hits[0] if len(hits) == 1 else None


def _torch_uuid(index: int) -> str | None:
    """``"GPU-<uuid>"`` of torch's device ``index`` when this torch reports it (2.3+), else None."""
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return None if uuid is None else f"GPU-{uuid}"


def _nvml_handle(pynvml: Any, target: int | str | None) -> Any:
    if target is None:
        return None
    if isinstance(target, int):
        return pynvml.nvmlDeviceGetHandleByIndex(target)
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    uuids = [u.decode() if isinstance(u, bytes) else str(u) for u in map(pynvml.nvmlDeviceGetUUID, handles)]
    found = match_uuid(target, uuids)
    return None if found is None else handles[found]


class PowerMonitor:
    """Context manager sampling ``nvmlDeviceGetPowerUsage`` every ``interval_s`` while the block runs."""

    def __init__(self, device: torch.device | str | None, interval_s: float = 0.02) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s={interval_s!r} must be > 0")
        self.device = as_device(device)
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
            import pynvml  # optional dependency: pip install prismatic_tr[gpu] (package nvidia-ml-py)

            pynvml.nvmlInit()
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            target = _torch_uuid(index) or nvml_target(index, os.environ.get("CUDA_VISIBLE_DEVICES"))
            self._handle = _nvml_handle(pynvml, target)
            if self._handle is None:
                return False
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
        self._stop.clear()  # a monitor may be entered more than once
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
