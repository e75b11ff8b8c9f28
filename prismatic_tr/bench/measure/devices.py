"""One place for device and dtype names: ``"auto"`` / ``"cpu"`` / ``"cuda"`` / ``"cuda:N"`` and
``"float32"`` / ``"float16"`` / ``"bfloat16"``, as the library and the command lines accept them.

>>> resolve_device("auto")            # cuda if available, else cpu
>>> resolve_dtype("bfloat16")         # torch.bfloat16
"""

from __future__ import annotations

import torch

DeviceLike = torch.device | str | None

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"


def as_device(device: DeviceLike) -> torch.device:
    """Normalise ``device`` (``None`` means CPU) to a ``torch.device``; ``ValueError`` if it is not one."""
    if device is None:
        return torch.device("cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device={device!r} is not a valid torch device (e.g. 'cpu', 'cuda', 'cuda:0')") from err


def device_type(device: DeviceLike) -> str:
    """``"cuda"`` / ``"cpu"`` / ...; ``None`` means the default device (cuda if available, else cpu)."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return as_device(device).type


def resolve_device(name: str, what: str = "device") -> torch.device:
    """``auto`` -> cuda if available else cpu; ``cpu``, ``cuda``, ``cuda:N`` as given.

    ``ValueError`` (naming ``what``, e.g. ``"--device"``) for anything else, or for CUDA when none is available.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"{what} {name!r} is not allowed; use {DEVICE_CHOICES}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{what} {name!r} is not allowed; use {DEVICE_CHOICES}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{what} {name!r} asked for CUDA but no CUDA device is available; use cpu")
    return dev


def resolve_dtype(name: str, what: str = "dtype", auto: torch.dtype | None = None) -> torch.dtype:
    """``DTYPES[name]``; ``"auto"`` gives ``auto`` when one is given. ``ValueError`` names the allowed names."""
    if name == "auto" and auto is not None:
        return auto
    if name not in DTYPES:
        allowed = (["auto"] if auto is not None else []) + sorted(DTYPES)
        raise ValueError(f"{what} {name!r} is not allowed; choose one of {', '.join(allowed)}")
    return DTYPES[name]
