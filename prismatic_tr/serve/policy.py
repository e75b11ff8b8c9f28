"""The model behind the server: a VLA and its processor, run on a batch of checked requests.

:class:`ServedPolicy` turns requests into one batched ``predict_action`` (OpenVLA's prompt, the processor's
padding) and returns one action per request. A batch of one is exactly the single call OpenVLA's server makes:
the same processor output, the same ``predict_action``. :func:`load_served_policy` loads what ``deploy.py``
serves: the bundled policy, a shipped adapter, a checkpoint directory or a random-weight preset, with a
reduction setting given as a spec (``prismatic_tr.vla.spec``) or the one the checkpoint / adapter carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from .protocol import ActRequest, ModelSpec

OWN = "own"  # the setting the checkpoint or adapter carries (the default)


@dataclass
class ServedPolicy:
    """``vla`` (``predict_action`` takes a padded batch) and ``processor``; ``name`` and ``setting`` describe it."""

    vla: Any
    processor: Any
    name: str
    setting: str = "none"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> ModelSpec:
        """What requests may hold: the model's action statistics keys; one image, no proprio."""
        return ModelSpec(tuple(sorted(getattr(self.vla, "norm_stats", None) or {})))

    @property
    def dtype(self) -> str:
        param = next(self.vla.parameters(), None)
        return str(param.dtype).replace("torch.", "") if param is not None else "unknown"

    def predict(self, requests: Sequence[ActRequest]) -> list[np.ndarray]:
        """One batched ``predict_action`` for requests that share an ``unnorm_key``; one (A,) action each."""
        from prismatic_tr.models import build_prompt

        keys = {r.unnorm_key for r in requests}
        if len(keys) != 1:
            raise ValueError(f"a batch shares one unnorm_key; got {sorted(keys)}")
        images = [Image.fromarray(r.images[0]).convert("RGB") for r in requests]  # as OpenVLA's deploy.py
        prompts = [build_prompt(r.instruction) for r in requests]
        inputs = self.processor(prompts, images)
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        actions = self.vla.predict_action(**inputs, unnorm_key=keys.pop(), do_sample=False)
        actions = np.asarray(actions).reshape(len(requests), -1)
        return [actions[i].copy() for i in range(len(requests))]

    def warm_up(self) -> None:
        """Run one request (a grey image) so the first client does not pay for lazy set-up."""
        grey = np.full((224, 224, 3), 128, dtype=np.uint8)
        self.predict([ActRequest((grey,), "pick up the red block", self.spec.unnorm_keys[0])])

    def info(self) -> dict[str, Any]:
        """What ``GET /info`` says about the model."""
        from prismatic_tr.vla import reduction_cut, visual_token_count

        try:
            tokens: int | None = visual_token_count(self.vla)
        except ValueError:
            tokens = None
        return {"model": self.name, "setting": self.setting, "cut": reduction_cut(self.vla), "dtype": self.dtype,
                "device": str(self.device), "visual_tokens": tokens, "unnorm_keys": list(self.spec.unnorm_keys),
                "max_images": self.spec.max_images, "proprio_dim": self.spec.proprio_dim, **self.details}


def apply_setting(vla: Any, setting: str | None) -> str:
    """Attach ``setting`` (a spec such as ``vision:diverse:0.1@0.25``, ``none`` for unreduced, or None / "own":
    keep what the model carries) and return the label of what is attached now."""
    from prismatic_tr.vla import apply_token_reduction_spec, current_token_reduction, setting_of

    if setting is not None and setting.strip() != OWN:
        apply_token_reduction_spec(vla, setting)  # checked in full before the model is touched
    attached = current_token_reduction(vla)
    return setting_of(attached).label if attached else "none"


def _load_model(vla_path: str | None, adapter: str | None, preset: str | None, dtype: torch.dtype,
                device: torch.device) -> tuple[Any, Any, str]:
    """(vla, processor, name): a preset, an adapter on its base, a checkpoint, or the bundled policy."""
    from prismatic_tr.models import build_processor, build_vla, load_vla
    from prismatic_tr.vla import apply_token_reduction_from_config

    if preset is not None:
        vla = build_vla(preset, dtype=dtype, device=device, seed=0).eval()
        return vla, build_processor(vla.config), f"preset {preset} (random weights, seed 0)"
    if adapter is not None:
        from prismatic_tr.policy.adapters import load_adapted_policy

        vla, processor = load_adapted_policy(adapter, base=vla_path, dtype=dtype, device=device)
        return vla.eval(), processor, f"{vla_path or 'bundled policy'} + adapter {adapter}"
    if vla_path is not None:
        vla, processor = load_vla(vla_path, dtype=dtype, device=device, reference_api=True)
        apply_token_reduction_from_config(vla)  # the setting the checkpoint carries, if any
        return vla.eval(), processor, str(vla_path)
    from prismatic_tr.policy.bundled import load_bundled_policy

    vla, processor = load_bundled_policy(dtype=dtype, device=device)
    return vla.eval(), processor, "bundled policy (prismatic_tr/assets/tabletop_policy)"


def load_served_policy(vla_path: str | None = None, adapter: str | None = None, preset: str | None = None,
                       setting: str | None = None, dtype: str = "auto", device: str = "auto") -> ServedPolicy:
    """The policy ``deploy.py`` serves: ``preset`` (random weights), ``adapter`` (merged into ``vla_path`` or the
    bundled policy, its setting attached), ``vla_path`` (a checkpoint, natively or through its remote code) or the
    bundled policy; then ``setting`` (a spec, ``none``, or None / "own" for what it carries). ``dtype`` "auto":
    bfloat16 on CUDA and on CPUs that multiply bf16 in hardware, else float32. ValueError naming a bad value."""
    from prismatic_tr.bench.measure.devices import dtype_choice, resolve_device

    if preset is not None and (vla_path is not None or adapter is not None):
        raise ValueError("--preset builds a random-weight model; give it without --vla_path and --adapter")
    dev = resolve_device(device, "--device")
    torch_dtype, why = dtype_choice(dtype, dev)
    if setting is not None and setting.strip() != OWN:
        from prismatic_tr.vla import parse_setting

        parse_setting(setting)  # fail before loading
    vla, processor, name = _load_model(vla_path, adapter, preset, torch_dtype, dev)
    if type(vla).__name__ == "NativeOpenVLAOFT":
        raise ValueError(f"{name} is an OpenVLA-OFT model; serving its several images, proprio and action chunks is "
                         "not built yet (deploy.py serves OpenVLA models)")
    if not getattr(vla, "norm_stats", None):
        raise ValueError(f"{name} has no action statistics (norm_stats; OpenVLA reads them from "
                         "dataset_statistics.json): actions cannot be un-normalised")
    label = apply_setting(vla, setting)
    return ServedPolicy(vla, processor, name, label, dev, {"dtype_reason": why})
