"""OpenVLA models as users load them: the backbone answers ``get_num_patches()`` while a reduction is attached.

OpenVLA's own ``PrismaticVisionBackbone`` (Hugging Face remote code) has no ``get_num_patches()``; attaching a
reduction adds it, removing the reduction takes it away again, and nothing else about the backbone changes.
Checked on OpenVLA's real classes (``../shared/reference/openvla_hf``, OpenVLA's pins), on a stand-in with the
same interface (both stacks), and on the package's reference model (which has its own ``get_num_patches()``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers.reference_clients import import_openvla_hf
from helpers.reference_models import build_reference_vla
from torch import nn

from prismatic_tr.models import build_vla
from prismatic_tr.vla import (
    apply_token_reduction_to_vla,
    get_token_reduction,
    remove_token_reduction,
    visual_token_count,
)

CHANNELS = {"dinosiglip-vit-so-224px": 6, "siglip-vit-so400m": 3}
# method, ratio, merge size -> patch tokens the projector receives (of 256)
SETTINGS = [("topk_magnitude", 0.3, 2, 77), ("random", 0.5, 2, 128), ("spatial_pool", 0.5, 2, 64)]


class OpenVLAStyleBackbone(nn.Module):
    """The interface of OpenVLA's ``PrismaticVisionBackbone`` (featurizers, ``embed_dim``, forward) and no
    ``get_num_patches()``, around the towers of the package's tiny model."""

    def __init__(self, towers: nn.Module) -> None:
        super().__init__()
        self.use_fused_vision_backbone = towers.use_fused_vision_backbone
        self.featurizer = towers.featurizer
        if self.use_fused_vision_backbone:
            self.fused_featurizer = towers.fused_featurizer
        self.embed_dim = towers.embed_dim

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if not self.use_fused_vision_backbone:
            return self.featurizer(pixel_values)
        img, img_fused = torch.split(pixel_values, [3, 3], dim=1)
        return torch.cat([self.featurizer(img), self.fused_featurizer(img_fused)], dim=2)


def openvla_remote_code_model(backbone_id: str) -> nn.Module:
    modeling = import_openvla_hf("modeling_prismatic")
    configuration = import_openvla_hf("configuration_prismatic")
    return build_reference_vla(modeling, configuration, backbone_id)


def stand_in_model(backbone_id: str) -> nn.Module:
    vla = build_vla("tiny", backbone_id, seed=0)
    vla.vision_backbone = OpenVLAStyleBackbone(vla.vision_backbone)
    return vla


BUILDERS = {"openvla-remote-code": openvla_remote_code_model, "stand-in": stand_in_model}


@pytest.fixture(scope="module", params=[(b, i) for b in BUILDERS for i in CHANNELS], ids=lambda p: f"{p[0]}-{p[1]}")
def model_and_inputs(request) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    builder, backbone_id = request.param
    vla = BUILDERS[builder](backbone_id)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 700, (1, 10), generator=g)  # inside the tiny model's vocabulary too
    ids[0, 0] = 1
    px = torch.randn(1, CHANNELS[backbone_id], 224, 224, generator=g)
    return vla, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": px}


def snapshot(backbone: nn.Module) -> dict[str, Any]:
    return {"class": type(backbone), "dict": dict(vars(backbone)), "has_count": hasattr(backbone, "get_num_patches")}


@pytest.mark.parametrize("method,ratio,merge,k", SETTINGS)
def test_get_num_patches_is_added_while_attached_and_gone_after(model_and_inputs, method, ratio, merge, k):
    vla, inputs = model_and_inputs
    backbone = vla.vision_backbone
    before = snapshot(backbone)
    assert before["has_count"] is False, "OpenVLA's backbone has no get_num_patches() of its own"
    keys = list(vla.state_dict())
    with torch.no_grad():
        logits = vla(**inputs).logits
    assert visual_token_count(vla) == 256
    apply_token_reduction_to_vla(vla, method, ratio, merge)
    try:
        assert backbone.get_num_patches() == k == get_token_reduction(vla).reduced_num_patches()
        assert visual_token_count(vla) == k
        with torch.no_grad():
            out = vla(**inputs)
        assert out.projector_features.shape[1] == k
        assert out.logits.shape[1] == logits.shape[1] - 256 + k
        assert list(vla.state_dict()) == keys
        action = vla.predict_action(**inputs, unnorm_key=next(iter(vla.norm_stats)), do_sample=False)
        assert action.shape == (7,)
    finally:
        remove_token_reduction(vla)
    assert snapshot(backbone) == before and not hasattr(backbone, "get_num_patches")
    assert visual_token_count(vla) == 256
    assert list(vla.state_dict()) == keys
    with torch.no_grad():
        assert torch.equal(vla(**inputs).logits, logits), "removal must restore bit-identical outputs"


def test_a_backbone_with_its_own_count_gets_it_back_unchanged():
    vla = build_vla("tiny", "siglip-vit-so400m", seed=0)
    backbone = vla.vision_backbone
    before = snapshot(backbone)
    own = type(backbone).get_num_patches
    with torch.no_grad():
        apply_token_reduction_to_vla(vla, "spatial_pool", spatial_merge_size=4)
        assert backbone.get_num_patches() == 16
        remove_token_reduction(vla)
    assert snapshot(backbone) == before
    assert type(backbone).get_num_patches is own and backbone.get_num_patches() == 256
