"""The model behind the server: a VLA and its processor, run on a batch of checked requests.

:class:`ServedPolicy` turns requests into one batched ``predict_action`` (OpenVLA's prompt, the processor's
padding) and returns one action per request. A batch of one is exactly the single call OpenVLA's server makes:
the same processor output, the same ``predict_action``. An OpenVLA-OFT model (``NativeOpenVLAOFT``) gets its
request as OFT's ``get_vla_action`` prepares one: the primary image, then the wrist images, each through the
processor with the prompt, their pixel values concatenated on the channel axis; the raw state normalised with the
``unnorm_key``'s proprio statistics; the answer is the (chunk, action_dim) chunk. :func:`load_served_policy` loads what ``deploy.py``
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
# How each model family (prismatic_tr.models.family) is served: "action" (one image in, one action out, as OpenVLA's
# deploy.py) or "chunk" (OFT's cameras and state in, the model's action chunk out: the native OpenVLA-OFT model).
SERVED: dict[str, str] = {"openvla": "action", "openvla-remote": "action", "openvla-oft": "chunk",
                          "openvla-oft-remote": "action"}


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
    def oft(self) -> Any:
        """The model's OFT settings (``OFTSettings``), or None for an OpenVLA model."""
        return chunk_settings(self.vla)

    @property
    def spec(self) -> ModelSpec:
        """What requests may hold: the model's action statistics keys; one image and no proprio (OpenVLA), or
        exactly the OFT model's images and, when it has a proprio projector, the state."""
        keys = tuple(sorted(getattr(self.vla, "norm_stats", None) or {}))
        oft = self.oft
        if oft is None:
            return ModelSpec(keys)
        n = self.vla.vision_backbone.get_num_images_in_input()
        proprio = oft.proprio_dim if self.vla.proprio_projector is not None else None
        return ModelSpec(keys, max_images=n, proprio_dim=proprio, min_images=n)

    @property
    def dtype(self) -> str:
        param = next(self.vla.parameters(), None)
        return str(param.dtype).replace("torch.", "") if param is not None else "unknown"

    def predict(self, requests: Sequence[ActRequest]) -> list[np.ndarray]:
        """One batched ``predict_action`` for requests that share an ``unnorm_key``; one (A,) action each."""
        from prismatic_tr.models import build_prompt
        from prismatic_tr.models.oft import camera_inputs

        keys = {r.unnorm_key for r in requests}
        if len(keys) != 1:
            raise ValueError(f"a batch shares one unnorm_key; got {sorted(keys)}")
        key = keys.pop()
        prompts = [build_prompt(r.instruction) for r in requests]
        cameras = max(len(r.images) for r in requests)
        if any(len(r.images) != cameras for r in requests):
            raise ValueError("a batch's requests hold the same number of images")
        # as OpenVLA's deploy.py (and OFT's get_vla_action, camera by camera): PIL RGB through the processor
        inputs = camera_inputs(self.processor, prompts, [[Image.fromarray(r.images[j]).convert("RGB")
                                                          for r in requests] for j in range(cameras)])
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        if self.oft is None:
            actions = self.vla.predict_action(**inputs, unnorm_key=key, do_sample=False)
            actions = np.asarray(actions).reshape(len(requests), -1)
        else:
            actions = self._predict_chunk(inputs, key, requests)
        return [actions[i].copy() for i in range(len(requests))]

    def _predict_chunk(self, inputs: dict[str, torch.Tensor], key: str, requests: Sequence[ActRequest]) -> np.ndarray:
        """(B, chunk, action_dim) from the OFT model, the requests' raw states normalised as OFT's client does."""
        from prismatic_tr.models.oft import normalize_oft_proprio

        oft, extra = self.oft, {}
        if self.spec.proprio_dim:
            stats = self.vla.norm_stats[key]["proprio"]
            state = np.stack([np.asarray(r.proprio, dtype=np.float64) for r in requests])
            extra["proprio"] = normalize_oft_proprio(state, stats, oft.normalization).astype(np.float32)
        actions, _ = self.vla.predict_action(**inputs, unnorm_key=key, do_sample=False, **extra)  # OFT's pair
        return np.asarray(actions).reshape(len(requests), oft.num_actions_chunk, oft.action_dim)

    def warm_up(self) -> None:
        """Run one request (grey images, a zero state) so the first client does not pay for lazy set-up."""
        spec = self.spec
        grey = np.full((224, 224, 3), 128, dtype=np.uint8)
        state = np.zeros(spec.proprio_dim, dtype=np.float32) if spec.proprio_dim else None
        self.predict([ActRequest((grey,) * spec.min_images, "pick up the red block", spec.unnorm_keys[0], state)])

    def info(self) -> dict[str, Any]:
        """What ``GET /info`` says about the model, and the machine it runs on (``machine``: CPU model and features,
        cores, threads; what a load test's timings record)."""
        from prismatic_tr.bench.measure.devices import machine_info
        from prismatic_tr.vla import reduction_cut, visual_token_count

        try:
            tokens: int | None = visual_token_count(self.vla)
        except ValueError:
            tokens = None
        oft = self.oft
        answer = ({"kind": "openvla", "action": "one (action_dim,) array"} if oft is None else
                  {"kind": "openvla-oft", "images": self.spec.min_images, "chunk": oft.num_actions_chunk,
                   "action_dim": oft.action_dim, "action": "a list of chunk (action_dim,) arrays"})
        return {"model": self.name, "setting": self.setting, "cut": reduction_cut(self.vla), "dtype": self.dtype,
                "device": str(self.device), "visual_tokens": tokens, "unnorm_keys": list(self.spec.unnorm_keys),
                "max_images": self.spec.max_images, "min_images": self.spec.min_images,
                "proprio_dim": self.spec.proprio_dim, "answer": answer, "machine": machine_info(self.device),
                **self.details}


def chunk_settings(vla: Any) -> Any:
    """The OFT settings (``OFTSettings``) of a model served as chunks (:data:`SERVED`), None for one served as
    single actions."""
    from prismatic_tr.models.family import family_of

    return vla.oft if SERVED[family_of(vla).name] == "chunk" else None


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
    if not getattr(vla, "norm_stats", None):
        raise ValueError(f"{name} has no action statistics (norm_stats; OpenVLA reads them from "
                         "dataset_statistics.json): actions cannot be un-normalised")
    if chunk_settings(vla) is not None and vla.proprio_projector is not None:
        lacking = sorted(k for k, v in vla.norm_stats.items() if "proprio" not in v)
        if lacking:
            raise ValueError(f"{name} is an OpenVLA-OFT model with a proprio projector but its statistics for "
                             f"{lacking} have no 'proprio' block (dataset_statistics.json): a robot's state cannot "
                             "be normalised as OFT's client does")
    label = apply_setting(vla, setting)
    return ServedPolicy(vla, processor, name, label, dev, {"dtype_reason": why})
