"""Small OpenVLA-OFT checkpoints built and saved by OFT's own code (``../shared/reference/openvla_oft``, pins only).

:func:`oft_reference` builds OFT's ``OpenVLAForActionPrediction`` (tiny towers, a two-layer Llama with OpenVLA's
padded vocabulary), its ``L1RegressionActionHead`` and ``ProprioProjector`` from OFT's modules, every weight filled
from its name (:func:`helpers.openvla_checkpoint.fill_deterministic_`). :func:`write_oft_checkpoint` saves them in
OFT's layout: ``save_pretrained`` of the VLA, each head's ``state_dict`` as ``<name>--<step>_checkpoint.pt`` with
DDP's ``module.`` prefix (as OFT's ``finetune.py`` saves them from its DDP-wrapped heads), ``dataset_statistics.json``
and the processor files.
"""

from __future__ import annotations

import copy
import json
import sys
import types
from pathlib import Path
from typing import Any

import torch
from helpers.openvla_checkpoint import config_fields, fill_deterministic_, processor_fields
from helpers.reference_clients import import_openvla_oft, tiny_timm_towers
from helpers.reference_models import require_remote_code_stack
from torch import nn

from prismatic_tr.models import ImageTransform, PrismaticProcessor, build_tokenizer

UNNORM_KEY = "oft_tiny"
STEP = "150000"


def oft_statistics(action_dim: int = 7, proprio_dim: int = 8) -> dict[str, Any]:
    """``dataset_statistics.json`` content for one dataset: action and proprio bounds (q01/q99 and min/max)."""
    def block(dim: int, scale: float, mask: bool) -> dict[str, Any]:
        low = [-scale * (1 + i / 10) for i in range(dim)]
        high = [scale * (1 + i / 5) for i in range(dim)]
        out = {"q01": low, "q99": high, "min": [2 * v for v in low], "max": [2 * v for v in high]}
        if mask:
            out["mask"] = [True] * (dim - 1) + [False]
        return out

    return {UNNORM_KEY: {"action": block(action_dim, 0.3, True), "proprio": block(proprio_dim, 0.5, False),
                         "num_transitions": 1000, "num_trajectories": 10}}


def import_action_heads() -> types.ModuleType:
    """OFT's ``prismatic/models/action_heads.py``. It imports diffusers' ``DDIMScheduler`` at module level for its
    diffusion head only; without diffusers a placeholder stands in for that one import while the module loads
    (taken out of ``sys.modules`` right after)."""
    try:
        import diffusers  # noqa: F401
    except ImportError:
        scheduling = types.ModuleType("diffusers.schedulers.scheduling_ddim")
        scheduling.DDIMScheduler = type("DDIMSchedulerPlaceholder", (), {})  # type: ignore[attr-defined]
        stubs = {"diffusers": types.ModuleType("diffusers"),
                 "diffusers.schedulers": types.ModuleType("diffusers.schedulers"),
                 "diffusers.schedulers.scheduling_ddim": scheduling}
        sys.modules.update(stubs)
        try:
            return import_openvla_oft("prismatic.models.action_heads")
        finally:
            for name in stubs:
                sys.modules.pop(name, None)
    return import_openvla_oft("prismatic.models.action_heads")


def sharpen_(vla: nn.Module, n_action_bins: int = 256) -> None:
    """Make positions and action tokens matter in a random-weight OFT model (in place): q / k scaled 6x
    (:func:`helpers.positions.sharpen_attention`) and the action tokens' rows of the LM head 3x, so that the discrete
    variant's argmax falls on different action tokens from slot to slot (unsharpened it picks one token for all)."""
    from helpers.positions import sharpen_attention

    sharpen_attention(vla.language_model)
    vocab = vla.config.text_config.vocab_size - vla.config.pad_to_multiple_of
    with torch.no_grad():
        vla.language_model.lm_head.weight[vocab - n_action_bins : vocab] *= 3.0


def oft_reference(seed: int = 1234) -> dict[str, Any]:
    """OFT's VLA (sharpened, :func:`sharpen_`), L1 head and proprio projector with deterministic weights; skips off
    the pins."""
    require_remote_code_stack()
    modeling = import_openvla_oft("prismatic.extern.hf.modeling_prismatic")
    configuration = import_openvla_oft("prismatic.extern.hf.configuration_prismatic")
    constants = import_openvla_oft("prismatic.vla.constants")
    heads = import_action_heads()
    projectors = import_openvla_oft("prismatic.models.projectors")
    fields = config_fields("dinosiglip-vit-so-224px", "resize-naive")
    fields["norm_stats"] = oft_statistics(constants.ACTION_DIM, constants.PROPRIO_DIM)
    config = configuration.OpenVLAConfig(**fields)
    with tiny_timm_towers():
        vla = modeling.OpenVLAForActionPrediction(config)
    fill_deterministic_(vla.eval(), seed)
    sharpen_(vla)
    llm_dim = vla.llm_dim
    head = heads.L1RegressionActionHead(input_dim=llm_dim, hidden_dim=llm_dim, action_dim=constants.ACTION_DIM)
    proprio = projectors.ProprioProjector(llm_dim=llm_dim, proprio_dim=constants.PROPRIO_DIM)
    fill_deterministic_(head.eval(), seed + 1)
    fill_deterministic_(proprio.eval(), seed + 2)
    return {"vla": vla, "action_head": head, "proprio_projector": proprio, "constants": constants}


def save_component(module: nn.Module, path: Path) -> None:
    """A head's state dict as OFT's finetune.py saves it from DDP: every key prefixed ``module.``."""
    torch.save({f"module.{k}": v for k, v in module.state_dict().items()}, str(path))


def write_oft_checkpoint(ref: dict[str, Any], out: Path, action_head: bool = True, proprio: bool = True) -> Path:
    """``ref`` (:func:`oft_reference`) saved in OFT's layout in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    ref["vla"].save_pretrained(str(out))
    if action_head:
        save_component(ref["action_head"], out / f"action_head--{STEP}_checkpoint.pt")
    if proprio:
        save_component(ref["proprio_projector"], out / f"proprio_projector--{STEP}_checkpoint.pt")
    (out / "dataset_statistics.json").write_text(json.dumps(copy.deepcopy(ref["vla"].norm_stats), indent=2))
    tokenizer = build_tokenizer(32000)
    transform = ImageTransform(processor_fields("dinosiglip-vit-so-224px", "resize-naive"))
    PrismaticProcessor(tokenizer, transform).save_pretrained(out)
    return out
