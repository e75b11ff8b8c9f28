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


# The instruction-set features that decide CPU speed here, recorded with every timing (``cpu_info``).
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
NATIVE_BF16_FEATURES = frozenset({"avx512_bf16", "amx_bf16"})


def _read_cpuinfo(cpuinfo: str | None) -> str:
    if cpuinfo is not None:
        return cpuinfo
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def cpu_info(cpuinfo: str | None = None) -> dict[str, object]:
    """``{"model": "Intel(R) Xeon(R) ...", "features": {"avx2": True, ...}}`` for :data:`CPU_FEATURES`, from
    ``cpuinfo`` (the text of ``/proc/cpuinfo``; read when None). Off Linux the model is ``platform.processor()``
    and every feature is None (unknown)."""
    import platform

    text = _read_cpuinfo(cpuinfo)
    flags: set[str] = set()
    model = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags.update(value.split())
        elif key.strip() == "model name" and not model:
            model = value.strip()
    known = bool(text)
    return {"model": model or platform.processor() or platform.machine(),
            "features": {f: (f in flags) if known else None for f in CPU_FEATURES}}


def cpu_feature_words(cpuinfo: str | None = None) -> str:
    """``"avx2, avx512f, amx_bf16"``: the :data:`CPU_FEATURES` this CPU has, for a results file's prose ("none of
    ..." when it has none, "unknown" off Linux)."""
    features = cpu_info(cpuinfo)["features"]
    if any(v is None for v in features.values()):  # type: ignore[union-attr]
        return "features unknown"
    have = [f for f, v in features.items() if v]  # type: ignore[union-attr]
    return ", ".join(have) if have else "none of " + ", ".join(CPU_FEATURES)


def machine_info(device: DeviceLike = None) -> dict[str, object]:
    """The machine a timing ran on, as every results file that holds a timing records it: ``cpu``
    (:func:`cpu_info`: model and :data:`CPU_FEATURES`), ``cores`` (``os.cpu_count()``), ``torch_threads``,
    ``torch`` (version), ``platform`` and ``gpu`` (the CUDA device's name; None off CUDA)."""
    import os
    import platform

    dev = as_device(device) if device is not None else None
    gpu = torch.cuda.get_device_name(dev) if dev is not None and dev.type == "cuda" else None
    return {"cpu": cpu_info(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "platform": platform.platform(), "gpu": gpu}


def timing_meta(command: str, dtype: torch.dtype | str, device: DeviceLike = None) -> dict[str, object]:
    """``{"command", "dtype", "machine"}``: what a results file records beside a timing, in one place (``dtype`` as
    its name, e.g. "bfloat16"; ``machine``: :func:`machine_info`)."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not allowed; use one of {', '.join(sorted(DTYPES))}")
    return {"command": command, "dtype": name, "machine": machine_info(device)}


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU multiplies bf16 in hardware (``avx512_bf16`` or ``amx_bf16`` among its flags).

    Without them PyTorch's CPU bf16 matmul falls back to a slow path: measured here on an AVX2-only AMD EPYC with
    torch 2.15, a 64 x 1024 x 1024 bf16 matmul ran at 0.9 GFLOP/s against 160 GFLOP/s in fp32. ``cpuinfo``: the
    text of ``/proc/cpuinfo`` (read when None; False where there is none, e.g. off Linux).
    """
    features = cpu_info(cpuinfo)["features"]
    return any(features.get(f) for f in NATIVE_BF16_FEATURES)  # type: ignore[union-attr]


def fast_dtype(device: torch.device) -> torch.dtype:
    """OpenVLA's inference dtype (bf16) where the device computes it in hardware (CUDA; a CPU with AVX512-BF16 or
    AMX), else float32."""
    if device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16()):
        return torch.bfloat16
    return torch.float32


def dtype_choice(name: str, device: torch.device, what: str = "--dtype",
                 cpuinfo: str | None = None) -> tuple[torch.dtype, str]:
    """(dtype, why): ``name`` resolved as :func:`resolve_dtype` does with ``auto`` = :func:`fast_dtype`, and a
    sentence saying why, for a results file."""
    if name != "auto":
        return resolve_dtype(name, what), f"{what} {name}: given"
    if device.type == "cuda":
        return torch.bfloat16, f"{what} auto: bfloat16, OpenVLA's inference dtype, on a CUDA device"
    if device.type == "cpu" and cpu_has_native_bf16(cpuinfo):
        have = [f for f in CPU_FEATURES if f in NATIVE_BF16_FEATURES and cpu_info(cpuinfo)["features"].get(f)]
        return torch.bfloat16, (f"{what} auto: bfloat16, OpenVLA's inference dtype: this CPU multiplies bf16 in "
                                f"hardware ({', '.join(have)})")
    return torch.float32, (f"{what} auto: float32: this {device.type} has no bf16 hardware (neither avx512_bf16 nor "
                           "amx_bf16), where bf16 matmuls run far slower than float32")


def resolve_dtype(name: str, what: str = "dtype", auto: torch.dtype | None = None) -> torch.dtype:
    """``DTYPES[name]``; ``"auto"`` gives ``auto`` when one is given. ``ValueError`` names the allowed names."""
    if name == "auto" and auto is not None:
        return auto
    if name not in DTYPES:
        allowed = (["auto"] if auto is not None else []) + sorted(DTYPES)
        raise ValueError(f"{what} {name!r} is not allowed; choose one of {', '.join(allowed)}")
    return DTYPES[name]
