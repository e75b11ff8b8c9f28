"""Break-even policy: does token reduction pay for this model, input size and batch size on this device?

The answer comes from a calibration profile - a small JSON written by ``vla_scripts/calibrate.py`` from a
sweep measured on the device - not from fixed thresholds:

>>> d = should_use_token_reduction("deit_base_patch16_224", 224, 1, device="cuda")
>>> d.use_reduction, d.expected_speedup, d.source, d.reason

Prediction from a profile: take the calibrated entries of the device type (those of the same timm model
if there are any, else all, by token count); keep the batch size nearest in log2; interpolate the measured
speedup linearly in log(tokens) (clamped to the end points); use reduction when it exceeds ``1 + margin``.

Default without a profile (``source == "default"``; the reason says so and where the threshold comes from,
``Decision.default_basis``): reduce iff the backbone sees at least ``DEFAULT_RULES[device_type].min_tokens``
tokens. Neither threshold is a break-even point measured on your device:

* ``cpu``: 197 tokens, the smallest input measured in this repository. DeiT-B/16 with TopK keep 0.1 at
  blocks 3/6/9 (fp32, one 2-core CPU) was 1.4-3.2x faster at every measured point, 197 and 785 tokens,
  batch 1-4, 1-2 threads (``benchmarks/results/vit/sweep_cpu_fp32_*/sweep.csv``, written by
  ``vla_scripts/sweep.py`` with the commands listed in ``benchmarks/results/vit/README.md``). No
  break-even was found; below 197 tokens nothing was measured, so the default does not reduce there.
* ``cuda`` (and any other accelerator): 400 tokens, NOT measured here. From the earlier DeiT-B study on an
  RTX 2080 Ti (TopK keep 0.1 at blocks 3/6/9; someone else's figures, not in this repository and not
  reproduced): 10-16 % slower at 197 tokens (224 px), 2.2x faster at 785 tokens (448 px); 400 lies between,
  near their geometric mean (393).

Profile lookup order: ``profile_path`` argument, ``$PRISMATIC_TR_CALIBRATION``, then
``~/.cache/prismatic_tr/calibration_<device type>.json``.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.bench.measure.devices import device_type

PROFILE_FORMAT = "prismatic_tr.calibration/1"


@dataclass(frozen=True)
class DefaultRule:
    """Reduce iff tokens >= ``min_tokens``; ``basis`` says where the threshold comes from (see module doc)."""

    min_tokens: int
    measured_here: bool
    basis: str


DEFAULT_RULES: dict[str, DefaultRule] = {
    "cpu": DefaultRule(197, True, "measured in this repository, on one 2-core CPU with DeiT-B/16 TopK keep 0.1 "
                                  "(benchmarks/results/vit/): reduction paid at every measured size, the smallest "
                                  "being 197 tokens; smaller inputs were not measured"),
    "cuda": DefaultRule(400, False, "NOT measured here: from the earlier DeiT-B study on an RTX 2080 Ti "
                                    "(10-16% slower at 197 tokens, 2.2x faster at 785), not reproduced in this "
                                    "repository"),
}
DEFAULT_BREAK_EVEN_TOKENS: dict[str, int] = {k: rule.min_tokens for k, rule in DEFAULT_RULES.items()}
DEFAULT_MARGIN = 0.02
ENV_VAR = "PRISMATIC_TR_CALIBRATION"


@dataclass
class Decision:
    """The policy's answer; truthy when reduction should be used."""

    use_reduction: bool
    expected_speedup: float | None  # predicted reduced/baseline throughput; None from the default rule
    source: str  # "profile" or "default"
    reason: str
    tokens: int
    device_type: str
    profile_path: str | None = None
    default_basis: str | None = None  # with source "default": where its threshold comes from

    def __bool__(self) -> bool:
        return self.use_reduction


def default_profile_path(device_type: str) -> Path:
    """``~/.cache/prismatic_tr/calibration_<device_type>.json``."""
    return Path.home() / ".cache" / "prismatic_tr" / f"calibration_{device_type}.json"


def count_tokens(model_name: str, input_size: int) -> int:
    """Tokens entering the first block (patches + prefix) of timm ``model_name`` at ``input_size`` px.

    Built with meta parameters (no memory); if timm cannot build it, estimated from the name
    (``patch<P>``, ``reg<R>`` registers, no CLS for ``siglip``).
    """
    from prismatic_tr.bench.measure.flops import empty_weights

    if isinstance(input_size, bool) or not isinstance(input_size, int) or input_size < 1:
        raise ValueError(f"input_size={input_size!r} must be an int >= 1")
    try:
        import timm

        from prismatic_tr.vit import split_method

        with empty_weights():
            model = timm.create_model(split_method(model_name)[1], pretrained=False, img_size=input_size)
        return int(model.patch_embed.num_patches) + int(getattr(model, "num_prefix_tokens", 0))
    except (RuntimeError, TypeError, ValueError, AttributeError):
        patch = re.search(r"patch(\d+)", model_name)
        if patch is None:
            raise ValueError(f"cannot count tokens of model_name={model_name!r}: not a timm ViT name") from None
        regs = re.search(r"reg(\d+)", model_name)
        prefix = (0 if "siglip" in model_name else 1) + (int(regs.group(1)) if regs else 0)
        return (input_size // int(patch.group(1))) ** 2 + prefix


def write_profile(rows: list[dict[str, Any]], path: Path, device_name: str = "", extra: dict | None = None) -> Path:
    """Save sweep rows (``prismatic_tr.bench.vit.sweep`` columns) as a calibration profile JSON."""
    if not rows:
        raise ValueError("write_profile() needs at least one sweep row, got none")
    from prismatic_tr.vit import split_method

    entries = [{"model": split_method(str(r["model"]))[1], "method": str(r["method"]), "input_size": int(r["input_size"]),
                "batch_size": int(r["batch_size"]), "tokens": int(r["tokens"]), "speedup": float(r["speedup"]),
                "flop_ratio": float(r["flop_ratio"]), "dtype": str(r["dtype"]), "mode": str(r["mode"])}
               for r in rows]
    profile = {"format": PROFILE_FORMAT, "device_type": device_type(str(rows[0]["device"])),
               "device_name": device_name, "torch": torch.__version__,
               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {}), "entries": entries}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile, indent=1) + "\n")
    return path


def load_profile(path: Path) -> dict[str, Any]:
    """Read and check a profile JSON (ValueError when it is not one)."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT or not data.get("entries"):
        raise ValueError(f"{path} is not a calibration profile (format {PROFILE_FORMAT!r} with entries)")
    return data


def predict_speedup(entries: list[dict[str, Any]], tokens: int, batch_size: int) -> float:
    """Speedup at ``tokens`` for the nearest calibrated batch size, interpolated in log(tokens)."""
    nearest = min({int(e["batch_size"]) for e in entries}, key=lambda b: abs(math.log2(b) - math.log2(batch_size)))
    pts = sorted((int(e["tokens"]), float(e["speedup"])) for e in entries if int(e["batch_size"]) == nearest)
    if tokens <= pts[0][0]:
        return pts[0][1]
    if tokens >= pts[-1][0]:
        return pts[-1][1]
    for (t0, s0), (t1, s1) in zip(pts[:-1], pts[1:], strict=True):
        if t0 <= tokens <= t1:
            frac = 0.0 if t1 == t0 else (math.log(tokens) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return s0 + frac * (s1 - s0)
    return pts[-1][1]  # unreachable: tokens lies within the sorted range


def _resolve(profile_path: str | Path | None, dev_type: str) -> Path:
    if profile_path is not None:
        return Path(profile_path)
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else default_profile_path(dev_type)


def _default(tokens: int, dev_type: str, why: str) -> Decision:
    rule = DEFAULT_RULES.get(dev_type, DEFAULT_RULES["cuda"])
    basis = rule.basis if dev_type in DEFAULT_RULES else f"no default for {dev_type}; the CUDA one, {rule.basis}"
    use = tokens >= rule.min_tokens
    reason = (f"{why}; using the default for {dev_type}: reduce iff tokens >= {rule.min_tokens} ({basis}) "
              f"-> {tokens} tokens: {'reduce' if use else 'do not reduce'}; measure this device with "
              f"vla_scripts/calibrate.py")
    return Decision(use, None, "default", reason, tokens, dev_type, default_basis=basis)


def should_use_token_reduction(model_name: str, input_size: int, batch_size: int,
                               device: torch.device | str | None = None,
                               profile_path: str | Path | None = None, margin: float = DEFAULT_MARGIN) -> Decision:
    """Decide from the device's calibration profile, or the documented default without one (see module doc)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
    dev_type = device_type(device)
    tokens = count_tokens(model_name, input_size)
    path = _resolve(profile_path, dev_type)
    if not path.exists():
        return _default(tokens, dev_type, f"no calibration profile at {path}")
    profile = load_profile(path)
    if profile.get("device_type") != dev_type:
        return _default(tokens, dev_type, f"profile {path} is for {profile.get('device_type')}, not {dev_type}")
    from prismatic_tr.vit import split_method

    base = split_method(model_name)[1]
    same = [e for e in profile["entries"] if e["model"] == base]
    entries = same or profile["entries"]
    speedup = predict_speedup(entries, tokens, batch_size)
    scope = base if same else f"other models ({', '.join(sorted({e['model'] for e in entries}))}) by token count"
    use = speedup > 1.0 + margin
    reason = (f"profile {path} ({profile.get('device_name') or dev_type}, {scope}): predicted speedup "
              f"{speedup:.2f}x at {tokens} tokens, batch {batch_size} -> {'reduce' if use else 'do not reduce'}")
    return Decision(use, speedup, "profile", reason, tokens, dev_type, str(path))


def decision_dict(decision: Decision) -> dict[str, Any]:
    """JSON-ready form of a Decision."""
    return asdict(decision)
