"""The native model against OpenVLA's own code: the same checkpoint gives the same numbers.

On OpenVLA's pins, small checkpoints are built and saved by OpenVLA's remote code (``../shared/reference``) and
loaded natively; both directions of the checkpoint format are checked. Golden values recorded that way from
OpenVLA's code live in ``tests/helpers/openvla_parity_golden.json``; on every stack the native model must
reproduce them from a natively written copy of the same checkpoint (same deterministic weights).
Re-record with ``PRISMATIC_TR_RECORD_GOLDEN=1`` on the pins stack.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.openvla_checkpoint import sample_image, write_native_checkpoint, write_upstream_checkpoint
from helpers.reference_clients import import_openvla_hf, tiny_timm_towers
from PIL import Image

from prismatic_tr.models import NativeOpenVLA, build_prompt, load_vla

GOLDEN = Path(__file__).resolve().parents[1] / "helpers" / "openvla_parity_golden.json"
INSTRUCTION = "pick up the red block"
CASES = [("dinosiglip-vit-so-224px", "resize-naive"), ("siglip-vit-so400m", "letterbox")]
PROJ_TOL, LOGIT_TOL = 1e-4, 1e-3


def _load_upstream(modeling, path: Path):
    """OpenVLA's own class from a checkpoint directory (its towers at the tiny sizes the config names)."""
    try:
        with tiny_timm_towers():
            return modeling.OpenVLAForActionPrediction.from_pretrained(str(path), torch_dtype=torch.float32).eval()
    except (AttributeError, TypeError, NotImplementedError) as err:  # transformers >= 4.50 / timm 1.x
        pytest.skip(f"OpenVLA's remote code cannot build its model on this stack: {type(err).__name__}: {err}")


def _inputs(processor) -> dict[str, torch.Tensor]:
    return dict(processor(build_prompt(INSTRUCTION), Image.fromarray(sample_image())))


def _with_empty_token(vla: NativeOpenVLA, ids: torch.Tensor) -> torch.Tensor:
    return torch.cat([ids, torch.tensor([[vla.empty_token_id]])], dim=1)


@torch.no_grad()
def _outputs(model, inputs: dict[str, torch.Tensor], ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Projector output and the logits of the first action token, from any model with OpenVLA's forward."""
    out = model(input_ids=ids, pixel_values=inputs["pixel_values"], output_projector_features=True)
    return {"projector": out.projector_features.float(), "logits": out.logits[:, -1].float()}


def _summary(outputs: dict[str, torch.Tensor], actions: np.ndarray, ids: torch.Tensor) -> dict:
    """What the golden file keeps: sampled projector values, top logits and fixed logit entries, actions."""
    proj, logits = outputs["projector"][0], outputs["logits"][0]
    top = logits.topk(10)
    return {
        "input_ids": ids[0].tolist(),
        "projector_shape": list(proj.shape),
        "projector_sample": proj[::17, ::5].flatten().tolist(),
        "projector_abs_sum": float(proj.abs().sum()),
        "logits_top_ids": top.indices.tolist(),
        "logits_top_values": top.values.tolist(),
        "logits_sample": logits[::997].tolist(),
        "actions": np.asarray(actions, dtype=np.float64).tolist(),
    }


@pytest.mark.parametrize("vision_backbone_id, strategy", CASES)
def test_openvla_checkpoint_loads_natively(tmp_path: Path, vision_backbone_id: str, strategy: str) -> None:
    """OpenVLA's code saves (sharded), the native loader reads: same pixels, projector, logits and actions."""
    modeling = import_openvla_hf("modeling_prismatic")
    write_upstream_checkpoint(tmp_path, vision_backbone_id, strategy, max_shard_size="1MB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    upstream = _load_upstream(modeling, tmp_path)
    processing = import_openvla_hf("processing_prismatic")
    upstream_images = processing.PrismaticImageProcessor.from_pretrained(str(tmp_path))
    vla, processor = load_vla(tmp_path)
    assert isinstance(vla, NativeOpenVLA) and vla.dtype == torch.float32
    inputs = _inputs(processor)
    theirs = upstream_images(Image.fromarray(sample_image()), return_tensors="pt")["pixel_values"]
    assert torch.equal(inputs["pixel_values"], theirs)
    ids = _with_empty_token(vla, inputs["input_ids"])
    ours, ref = _outputs(vla, inputs, ids), _outputs(upstream, inputs, ids)
    proj_diff = (ours["projector"] - ref["projector"]).abs().max().item()
    logit_diff = (ours["logits"] - ref["logits"]).abs().max().item()
    print(f"\nparity {vision_backbone_id}: projector max|diff| {proj_diff:.2e}, logits max|diff| {logit_diff:.2e}")
    assert proj_diff <= PROJ_TOL and logit_diff <= LOGIT_TOL
    assert torch.equal(ours["logits"].argmax(-1), ref["logits"].argmax(-1))
    ref_actions = upstream.predict_action(input_ids=inputs["input_ids"], pixel_values=inputs["pixel_values"],
                                          unnorm_key="bridge_orig", do_sample=False)
    actions = vla.predict_action(**inputs, unnorm_key="bridge_orig")
    np.testing.assert_array_equal(actions, ref_actions)


def test_native_checkpoint_loads_in_openvla(tmp_path: Path) -> None:
    """The other direction: a natively written checkpoint is one OpenVLA's own class loads, same outputs."""
    modeling = import_openvla_hf("modeling_prismatic")
    write_native_checkpoint(tmp_path)
    upstream = _load_upstream(modeling, tmp_path)
    vla, processor = load_vla(tmp_path)
    inputs = _inputs(processor)
    ids = _with_empty_token(vla, inputs["input_ids"])
    ours, ref = _outputs(vla, inputs, ids), _outputs(upstream, inputs, ids)
    assert (ours["logits"] - ref["logits"]).abs().max().item() <= LOGIT_TOL


@pytest.mark.parametrize("vision_backbone_id, strategy", CASES)
def test_native_model_reproduces_openvla_golden_values(tmp_path: Path, vision_backbone_id: str, strategy: str) -> None:
    """On any stack: the natively written copy of the checkpoint reproduces OpenVLA's recorded outputs.

    On the pins with ``PRISMATIC_TR_RECORD_GOLDEN=1`` the values are (re-)recorded from OpenVLA's code.
    """
    key = f"{vision_backbone_id}/{strategy}"
    if os.environ.get("PRISMATIC_TR_RECORD_GOLDEN") == "1":
        modeling = import_openvla_hf("modeling_prismatic")
        write_upstream_checkpoint(tmp_path, vision_backbone_id, strategy)
        upstream = _load_upstream(modeling, tmp_path)
        _, processor = load_vla(tmp_path)
        inputs = _inputs(processor)
        ids = torch.cat([inputs["input_ids"], torch.tensor([[29871]])], dim=1)
        actions = upstream.predict_action(input_ids=inputs["input_ids"], pixel_values=inputs["pixel_values"],
                                          unnorm_key="bridge_orig", do_sample=False)
        golden = json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}
        golden[key] = _summary(_outputs(upstream, inputs, ids), actions, ids)
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())[key]
    write_native_checkpoint(tmp_path / "native", vision_backbone_id, strategy)
    vla, processor = load_vla(tmp_path / "native")
    inputs = _inputs(processor)
    ids = _with_empty_token(vla, inputs["input_ids"])
    assert ids[0].tolist() == golden["input_ids"]
    ours = _summary(_outputs(vla, inputs, ids), vla.predict_action(**inputs, unnorm_key="bridge_orig"), ids)
    assert ours["projector_shape"] == golden["projector_shape"]
    np.testing.assert_allclose(ours["projector_sample"], golden["projector_sample"], atol=PROJ_TOL, rtol=0)
    np.testing.assert_allclose(ours["projector_abs_sum"], golden["projector_abs_sum"], rtol=1e-5)
    assert ours["logits_top_ids"][0] == golden["logits_top_ids"][0]
    np.testing.assert_allclose(ours["logits_top_values"], golden["logits_top_values"], atol=LOGIT_TOL, rtol=0)
    np.testing.assert_allclose(ours["logits_sample"], golden["logits_sample"], atol=LOGIT_TOL, rtol=0)
    np.testing.assert_array_equal(ours["actions"], golden["actions"])
