"""Each family's native model is a drop-in for the code its users already run.

- OpenVLA-OFT: OFT's own robot client, ``get_vla_action`` of ``experiments/robot/openvla_utils.py`` (imported
  unchanged from ``../shared/reference/openvla_oft``, :mod:`helpers.oft_client`), unpacks
  ``actions, _ = vla.predict_action(...)``. On a small native OFT model it returns the chunk the model gives the same
  images, prompt and normalised state, in both of its branches (OFT's heads passed in, or none).
- OpenVLA: OpenVLA's inference snippet (``processor(prompt, image)``, then
  ``vla.predict_action(**inputs, unnorm_key=..., do_sample=False)``) gets one (7,) action, as from OpenVLA's own
  model; on the pins the same checkpoint loaded by OpenVLA's remote code gives the same action.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from helpers.openvla_checkpoint import sample_image
from PIL import Image

from prismatic_tr.models import (
    NativeOpenVLAOFT,
    build_oft_vla,
    build_processor,
    build_prompt,
    build_vla,
    load_vla,
)
from prismatic_tr.models.oft import camera_inputs, normalize_oft_proprio
from prismatic_tr.models.processor import load_tokenizer

TASK = "Pick up the red block"
KEY = "bridge_orig"

# images, proprio, head, heads passed to get_vla_action (False: its "standard VLA" branch, no head, no proprio)
OFT_CASES = [(2, True, "l1_regression", True), (1, False, "discrete", False), (1, True, "l1_regression", False)]


def camera(seed: int) -> np.ndarray:
    """A 224 x 224 uint8 RGB frame: the size OFT's client passes on without resizing."""
    return sample_image(seed, (224, 224))


def oft_model(images: int, proprio: bool, head: str) -> NativeOpenVLAOFT:
    """A tiny random-weight native OFT model."""
    return build_oft_vla("tiny", oft={"num_images_in_input": images, "proprio_dim": 8 if proprio else None,
                                      "action_head": head}, seed=5)


def observation(images: int, seed: int) -> dict[str, Any]:
    """OFT's observation dict: the third-person frame, wrist frames (keys holding "wrist") and the raw state."""
    obs: dict[str, Any] = {"full_image": camera(seed), "state": np.linspace(-0.4, 0.6, 8) + 0.1 * seed}
    obs.update({f"wrist_image_{i}": camera(seed + 10 * (i + 1)) for i in range(images - 1)})
    return obs


def native_chunk(vla: NativeOpenVLAOFT, processor: Any, obs: dict[str, Any], use_proprio: bool) -> np.ndarray:
    """The native model's own chunk for ``obs``: the package's prompt and camera stacking, pixel values in bfloat16
    (as OFT's client casts them), the state normalised with the key's proprio statistics."""
    frames = [obs["full_image"], *(obs[k] for k in obs if "wrist" in k)]
    inputs = camera_inputs(processor, [build_prompt(TASK.lower())], [[Image.fromarray(f)] for f in frames])
    inputs = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in inputs.items()}
    extra = {}
    if use_proprio:
        extra["proprio"] = normalize_oft_proprio(obs["state"], vla.norm_stats[KEY]["proprio"], vla.oft.normalization)
    with torch.no_grad():
        actions, hidden = vla.predict_action(**inputs, unnorm_key=KEY, do_sample=False, **extra)
    assert hidden.shape == (1, vla.oft.num_action_slots, vla.config.text_config.hidden_size)
    return actions


@pytest.mark.parametrize("images,proprio,head,pass_heads", OFT_CASES)
def test_ofts_own_get_vla_action_runs_the_native_model(images, proprio, head, pass_heads):
    from helpers.oft_client import import_oft_client

    client = import_oft_client()
    vla, use_proprio = oft_model(images, proprio, head), proprio and pass_heads
    processor = build_processor(vla.config)
    cfg = SimpleNamespace(num_images_in_input=images, use_proprio=use_proprio, unnorm_key=KEY, center_crop=False)
    heads = {"action_head": vla.action_head, "proprio_projector": vla.proprio_projector} if pass_heads else {}
    chunks = []
    for seed in (0, 1):
        obs = observation(images, seed)
        got = client.get_vla_action(cfg, vla, processor, dict(obs), TASK, **heads)
        assert isinstance(got, list) and len(got) == vla.oft.num_actions_chunk
        assert all(isinstance(a, np.ndarray) and a.shape == (vla.oft.action_dim,) for a in got)
        chunks.append(np.stack(got))
        np.testing.assert_array_equal(chunks[-1], native_chunk(vla, processor, obs, use_proprio))
    if head == "l1_regression":  # the tiny random discrete variant picks the same bins whatever it sees
        assert np.abs(chunks[0] - chunks[1]).max() > 1e-6, "another observation must change the chunk"


# --- OpenVLA's inference snippet ---


def openvla_snippet(vla: Any, processor: Any, image: Image.Image) -> Any:
    """OpenVLA's README: the processor's output moved to the model's device and dtype, then ``predict_action``."""
    prompt = f"In: What action should the robot take to {TASK.lower()}?\nOut:"
    inputs = processor(prompt, image).to("cpu", dtype=torch.float32)
    with torch.no_grad():
        return vla.predict_action(**inputs, unnorm_key=KEY, do_sample=False)


def test_openvla_snippet_gets_one_action_from_the_native_model():
    vla = build_vla("tiny", seed=0).eval()
    action = openvla_snippet(vla, build_processor(vla.config), Image.fromarray(sample_image()))
    assert isinstance(action, np.ndarray) and action.shape == (7,) and np.isfinite(action).all()


def test_openvla_snippet_acts_alike_on_openvlas_own_model_and_the_native_one(tmp_path: Path):
    from helpers.openvla_checkpoint import write_upstream_checkpoint
    from helpers.reference_clients import import_openvla_hf, tiny_timm_towers
    from helpers.reference_models import require_remote_code_stack

    require_remote_code_stack()
    modeling = import_openvla_hf("modeling_prismatic")
    processing = import_openvla_hf("processing_prismatic")
    write_upstream_checkpoint(tmp_path)
    with tiny_timm_towers():
        upstream = modeling.OpenVLAForActionPrediction.from_pretrained(str(tmp_path), torch_dtype=torch.float32).eval()
    native, processor = load_vla(tmp_path)
    image = Image.fromarray(sample_image())
    # OpenVLA's processor from the checkpoint's files (AutoProcessor would need the remote-code registration), its
    # tokenizer giving what Llama's gives (no token_type_ids, which OpenVLA's generate refuses)
    tokenizer = load_tokenizer(tmp_path)
    tokenizer.model_input_names = ["input_ids", "attention_mask"]
    theirs_processor = processing.PrismaticProcessor(processing.PrismaticImageProcessor.from_pretrained(str(tmp_path)),
                                                     tokenizer)
    theirs = openvla_snippet(upstream, theirs_processor, image)
    ours = openvla_snippet(native, processor, image)
    assert type(ours) is type(theirs) is np.ndarray and ours.shape == theirs.shape == (7,)
    np.testing.assert_array_equal(ours, theirs)
