"""Attaching reducers to OpenVLA models: every strategy x both backbones, wrappers, removal, persistence."""

from __future__ import annotations

import itertools

import pytest
import timm
import torch
from helpers.calls import run_and_kept
from torch import nn

from experiments.robot.token_reduction_utils import (
    apply_50_percent_topk_reduction,
    apply_token_reduction_from_config,
    apply_token_reduction_to_vla,
    get_token_reduction,
    monkey_patch_vision_backbone_with_reduction,
    remove_token_reduction,
)
from prismatic_tr.models import ReferenceOpenVLA, build_vla

BACKBONES = {"dinosiglip-vit-so-224px": 6, "siglip-vit-so400m": 3}  # id -> image channels
# method, ratio, merge size, patch tokens the projector receives (of 256)
SETTINGS = [
    ("topk_magnitude", 0.5, 2, 128),
    ("topk_magnitude", 0.25, 2, 64),
    ("attention_score", 0.75, 2, 192),
    ("random", 0.5, 2, 128),
    ("spatial_pool", 0.5, 2, 64),
    ("spatial_pool", 0.5, 4, 16),
]


@pytest.fixture(scope="module", params=list(BACKBONES))
def vla_and_inputs(request):
    vla = build_vla("tiny", request.param, seed=0)
    g = torch.Generator().manual_seed(1)
    px = torch.randn(2, BACKBONES[request.param], 224, 224, generator=g)
    ids = torch.randint(3, 700, (2, 12), generator=g)
    ids[:, 0] = 1
    return vla, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": px}


def run(vla: nn.Module, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return vla(**inputs).logits


@pytest.mark.parametrize("method,ratio,merge,expected", SETTINGS)
def test_forward_and_predict_action_see_the_reduced_count(vla_and_inputs, method, ratio, merge, expected):
    vla, inputs = vla_and_inputs
    before = run(vla, inputs)
    keys = list(vla.state_dict())
    assert apply_token_reduction_to_vla(vla, method, ratio, merge) is vla
    try:
        out = vla(**inputs)
        assert out.projector_features.shape[1] == expected
        assert out.logits.shape[1] == inputs["input_ids"].shape[1] + expected
        assert vla.vision_backbone.get_num_patches() == expected
        assert list(vla.state_dict()) == keys
        action = vla.predict_action(input_ids=inputs["input_ids"][:1], pixel_values=inputs["pixel_values"][:1],
                                    unnorm_key="bridge_orig")
        assert action.shape == (7,)
    finally:
        remove_token_reduction(vla)
    assert vla.vision_backbone.get_num_patches() == 256
    assert torch.equal(run(vla, inputs), before), "removal must restore bit-identical outputs"
    assert not hasattr(vla.config, "token_reduction") or vla.config.token_reduction is None


def test_fused_backbone_reduces_both_towers_at_the_same_positions():
    vla = build_vla("tiny", "dinosiglip-vit-so-224px")
    px = torch.randn(1, 6, 224, 224)
    with monkey_patch_vision_backbone_with_reduction(vla, "topk_magnitude", 0.25):
        full = vla.vision_backbone.forward(px)  # no hooks: unreduced (1, 256, D_dino + D_siglip)
        reduced, idx = run_and_kept(vla, lambda: vla.vision_backbone(px))
    d_dino = vla.vision_backbone.featurizer.embed_dim
    picked = full[0, idx[0]]
    assert torch.equal(reduced[0, :, :d_dino], picked[:, :d_dino])
    assert torch.equal(reduced[0, :, d_dino:], picked[:, d_dino:])


def test_applying_again_replaces_and_never_stacks(vla_and_inputs):
    vla, inputs = vla_and_inputs
    apply_token_reduction_to_vla(vla, "topk_magnitude", 0.5)
    apply_token_reduction_to_vla(vla, "spatial_pool", spatial_merge_size=2)
    try:
        assert len(vla.vision_backbone._forward_hooks) == 1
        assert vla(**inputs).projector_features.shape[1] == 64
        assert vla.config.token_reduction["method"] == "spatial_pool"
    finally:
        assert remove_token_reduction(vla) is True
    assert remove_token_reduction(vla) is False
    assert len(vla.vision_backbone._forward_hooks) == 0
    assert type(vla.vision_backbone).__name__ == "NativeVisionBackbone"


def test_quick_helpers_are_undoable(vla_and_inputs):
    vla, inputs = vla_and_inputs
    before = run(vla, inputs)
    with pytest.deprecated_call():
        apply_50_percent_topk_reduction(vla)
    assert get_token_reduction(vla).reducer.cfg.keep_ratio == 0.5
    remove_token_reduction(vla)
    with pytest.deprecated_call(), \
            monkey_patch_vision_backbone_with_reduction(vla, method="attention_score", reduction_ratio=0.25):
        assert vla(**inputs).projector_features.shape[1] == 64
    assert get_token_reduction(vla) is None
    assert torch.equal(run(vla, inputs), before)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"method": "nope"}, "unknown reduction method 'nope'"),
        ({"reduction_ratio": 0.0}, "reduction_ratio=0.0"),
        ({"reduction_ratio": 2}, "reduction_ratio=2"),
        ({"method": "spatial_pool", "spatial_merge_size": 0}, "spatial_merge_size=0"),
        ({"method": "spatial_pool", "spatial_merge_size": 3}, "does not divide the 16x16"),
        ({"keep_cls_token": "yes"}, "keep_cls_token='yes'"),
    ],
)
def test_bad_settings_fail_before_the_model_is_touched(vla_and_inputs, kwargs, match):
    vla, _ = vla_and_inputs
    apply_token_reduction_to_vla(vla, "random", 0.5)
    with pytest.raises(ValueError, match=match):
        apply_token_reduction_to_vla(vla, **kwargs)
    assert get_token_reduction(vla).reducer.cfg.method == "random", "the earlier reduction must survive"
    remove_token_reduction(vla)


def test_model_without_backbone_gets_a_clear_error():
    with pytest.raises(ValueError, match="Unable to locate vision_backbone.*peft.PeftModel"):
        apply_token_reduction_to_vla(nn.Linear(2, 2))


def test_peft_wrapped_model(vla_and_inputs):
    peft = pytest.importorskip("peft")
    vla, inputs = vla_and_inputs
    fresh = build_vla("tiny", "siglip-vit-so400m", seed=3)
    model = peft.get_peft_model(fresh, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    inputs = dict(inputs, pixel_values=inputs["pixel_values"][:, :3])
    before = run(model, inputs)
    apply_token_reduction_to_vla(model, "topk_magnitude", 0.5)
    assert model(**inputs).projector_features.shape[1] == 128
    assert fresh.config.token_reduction["keep_ratio"] == 0.5
    remove_token_reduction(model)
    assert torch.equal(run(model, inputs), before)


@pytest.mark.parametrize("spec", ["diverse_merge:0.25", "vision:diverse_merge:0.25@0.25"])
def test_a_merge_acts_through_a_peft_wrapper_as_on_the_bare_model(spec: str) -> None:
    """`diverse_merge` (its groups' sizes weighed in the towers and the language model) attached through PEFT gives
    the logits it gives on the same model unwrapped (LoRA starts at zero), not `diverse`'s, and comes off leaving the
    wrapped model's logits exactly as before."""
    peft = pytest.importorskip("peft")
    from prismatic_tr.vla import apply_token_reduction_spec

    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 700, (2, 12), generator=g)
    ids[:, 0] = 1
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": torch.randn(2, 6, 224, 224,
                                                                                                     generator=g)}
    bare = build_vla("tiny", "dinosiglip-vit-so-224px", seed=3)
    wrapped = peft.get_peft_model(build_vla("tiny", "dinosiglip-vit-so-224px", seed=3),
                                  peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    before = run(wrapped, inputs)
    apply_token_reduction_spec(bare, spec)
    apply_token_reduction_spec(wrapped, spec)
    try:
        merged = run(wrapped, inputs)
        torch.testing.assert_close(merged, run(bare, inputs), rtol=1e-5, atol=1e-5)
        apply_token_reduction_spec(bare, spec.replace("diverse_merge", "diverse"))
        assert not torch.allclose(merged, run(bare, inputs), atol=1e-4)
    finally:
        remove_token_reduction(wrapped)
        remove_token_reduction(bare)
    assert torch.equal(run(wrapped, inputs), before)


def test_ddp_and_compile_wrappers_are_seen_through(tmp_path):
    import torch.distributed as dist

    vla = build_vla("tiny", "siglip-vit-so400m")
    compiled = torch.compile(vla)
    apply_token_reduction_to_vla(compiled, "spatial_pool")
    assert vla.vision_backbone.get_num_patches() == 64
    remove_token_reduction(compiled)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        ddp = nn.parallel.DistributedDataParallel(vla)
        apply_token_reduction_to_vla(ddp, "topk_magnitude", 0.25)
        ids = torch.tensor([[1, 5, 6, 7]])
        assert ddp(input_ids=ids, pixel_values=torch.randn(1, 3, 224, 224)).projector_features.shape[1] == 64
        remove_token_reduction(ddp)
    finally:
        dist.destroy_process_group()


def test_settings_survive_save_and_load(tmp_path, vla_and_inputs):
    vla, inputs = vla_and_inputs
    apply_token_reduction_to_vla(vla, "attention_score", 0.25, seed=7)
    expected = run(vla, inputs)
    vla.save_pretrained(tmp_path)
    remove_token_reduction(vla)
    loaded = ReferenceOpenVLA.from_pretrained(tmp_path)
    assert get_token_reduction(loaded) is None
    handle = apply_token_reduction_from_config(loaded)
    assert handle is not None and handle.settings.seed == 7
    assert loaded.vision_backbone.get_num_patches() == 64
    assert torch.equal(run(loaded, inputs), expected)
    handle.remove()
    assert loaded.config.token_reduction is None
    assert apply_token_reduction_from_config(loaded) is None


# --- the native prismatic flavour: dict pixel values, a ``num_patches`` property, ``llm_backbone`` ---
class NativeBackbone(nn.Module):
    """Like prismatic's DinoSigLIPViTBackbone: two featurizers, a dict of images, a num_patches property."""

    def __init__(self, emit_prefix: bool = False) -> None:
        super().__init__()
        kw = dict(img_size=56, patch_size=14, embed_dim=16, depth=1, num_heads=2, num_classes=0)
        self.featurizer = timm.models.vision_transformer.VisionTransformer(reg_tokens=4, **kw)
        self.fused_featurizer = timm.models.vision_transformer.VisionTransformer(class_token=False, global_pool="avg", **kw)
        self.emit_prefix = emit_prefix

    @property
    def num_patches(self) -> int:
        return self.featurizer.patch_embed.num_patches

    def forward(self, pixel_values: dict[str, torch.Tensor]) -> torch.Tensor:
        dino = self.featurizer.forward_features(pixel_values["dino"])
        siglip = self.fused_featurizer.forward_features(pixel_values["siglip"])
        if not self.emit_prefix:
            dino = dino[:, self.featurizer.num_prefix_tokens :]
        else:
            siglip = torch.cat([siglip[:, :5], siglip], dim=1)
        return torch.cat([dino, siglip], dim=2)


class NativeVLM(nn.Module):
    def __init__(self, emit_prefix: bool = False) -> None:
        super().__init__()
        self.vision_backbone = NativeBackbone(emit_prefix)
        self.projector = nn.Linear(32, 8)
        self.llm_backbone = nn.Identity()

    def forward(self, pixel_values: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.projector(self.vision_backbone(pixel_values))


@pytest.mark.parametrize("method,expected", [("topk_magnitude", 8), ("spatial_pool", 4), ("random", 8)])
def test_native_prismatic_model(method, expected):
    vlm = NativeVLM()
    px = {"dino": torch.randn(1, 3, 56, 56), "siglip": torch.randn(1, 3, 56, 56)}
    before = vlm(px)
    with monkey_patch_vision_backbone_with_reduction(vlm, method, 0.5):
        assert vlm.vision_backbone.num_patches == expected
        assert vlm(px).shape == (1, expected, 8)
    assert vlm.vision_backbone.num_patches == 16
    assert type(vlm.vision_backbone) is NativeBackbone
    assert torch.equal(vlm(px), before)


@pytest.mark.parametrize("keep_cls,expected", [(True, 5 + 8), (False, 11)])
def test_prefix_tokens_are_kept_when_asked(keep_cls, expected):
    vlm = NativeVLM(emit_prefix=True)
    px = {"dino": torch.randn(1, 3, 56, 56), "siglip": torch.randn(1, 3, 56, 56)}
    full = vlm.vision_backbone.forward(px)
    with monkey_patch_vision_backbone_with_reduction(vlm, "topk_magnitude", 0.5, keep_cls_token=keep_cls):
        reduced = vlm.vision_backbone(px)
    assert reduced.shape[1] == expected
    if keep_cls:
        assert torch.equal(reduced[:, :5], full[:, :5])


@pytest.mark.parametrize("method,backbone", list(itertools.product(["topk_magnitude", "spatial_pool"], BACKBONES)))
def test_bf16_model_keeps_its_dtype(method, backbone):
    vla = build_vla("tiny", backbone, dtype=torch.bfloat16)
    apply_token_reduction_to_vla(vla, method, 0.5)
    px = torch.randn(1, BACKBONES[backbone], 224, 224, dtype=torch.bfloat16)
    out = vla(input_ids=torch.tensor([[1, 9, 10]]), pixel_values=px)
    assert out.projector_features.dtype == torch.bfloat16 and out.projector_features.shape[1] in (64, 128)


def test_multi_image_backbone_reports_per_image_counts():
    """OpenVLA-OFT style: two images per sample, tokens concatenated, get_num_patches() per image."""
    vla = build_vla("tiny", "siglip-vit-so400m")
    backbone = vla.vision_backbone
    single = type(backbone).forward

    class TwoImages(type(backbone)):
        def get_num_images_in_input(self) -> int:
            return 2

        def forward(self, pixel_values):
            first, second = torch.split(pixel_values, [3, 3], dim=1)
            return torch.cat([single(self, first), single(self, second)], dim=1)

    backbone.__class__ = TwoImages
    px = torch.randn(1, 6, 224, 224)
    with monkey_patch_vision_backbone_with_reduction(vla, "topk_magnitude", 0.25) as handle:
        assert handle.reduced_num_patches() == 128  # 25 % of 256 from each of the 2 images
        assert backbone.get_num_patches() * backbone.get_num_images_in_input() == 128
        assert vla.projector(backbone(px)).shape[1] == 128
    assert backbone.get_num_patches() == 256 and type(backbone) is TwoImages
    with monkey_patch_vision_backbone_with_reduction(vla, "spatial_pool"):  # each image pooled on its 16 x 16 grid
        assert backbone.get_num_patches() == 64 and backbone(px).shape[1] == 128
