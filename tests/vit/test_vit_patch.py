"""Patching timm ViTs with topk / tome / hquota_ff: identity, removal, prefix tokens, token counts, errors."""

from __future__ import annotations

import copy
import math
from collections import Counter

import pytest
import timm
import torch
from timm.models.vision_transformer import VisionTransformer
from torch.utils._python_dispatch import TorchDispatchMode

from prismatic_tr.bench.measure.ops import HOST_SYNC_OPS
from prismatic_tr.vit import apply_vit_reduction, create_model, get_vit_reduction, tokens_per_location

DEPTH, PATCHES = 4, 64  # 32 px images, 4 px patches

FAMILIES = {  # tiny stand-ins for DeiT (CLS), DINOv2 reg4 (CLS + 4 registers, LayerScale), SigLIP (no prefix, MAP head)
    "deit": dict(class_token=True, global_pool="token"),
    "deit_qknorm": dict(class_token=True, global_pool="token", qk_norm=True),
    "dinov2_reg4": dict(class_token=True, reg_tokens=4, init_values=0.5, global_pool="token"),
    "siglip": dict(class_token=False, global_pool="map"),
}
NO_REDUCTION = [("topk", dict(keep_ratio=1.0)), ("tome", dict(r=0)), ("hquota_ff", dict(keep_ratio=1.0)),
                ("tome", dict(keep_ratio=1.0, reduction_loc=[0, 3]))]
REDUCTIONS = [
    ("topk", dict(keep_ratio=0.5, reduction_loc=[1, 2])),
    ("topk", dict(keep_ratio=[0.9, 0.3], reduction_loc=[0, 3])),
    ("tome", dict(r=9)),
    ("tome", dict(r=(12, -1))),
    ("tome", dict(r=[30, 0, 5])),
    ("tome", dict(keep_ratio=0.6, reduction_loc=[1, 2])),
    ("hquota_ff", dict(keep_ratio=0.6, reduction_loc=[1, 2])),
    ("hquota_ff", dict(r=[0, 20, 0, 4])),
]


def build(family: str, fused: bool = True, **extra: object) -> VisionTransformer:
    torch.manual_seed(0)
    model = VisionTransformer(img_size=32, patch_size=4, embed_dim=32, depth=DEPTH, num_heads=2, num_classes=10,
                              **FAMILIES[family], **extra).eval()
    for blk in model.blocks:
        blk.attn.fused_attn = fused
    return model


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_identity_without_reduction(family: str, fused: bool, images: torch.Tensor) -> None:
    model = build(family, fused)
    with torch.no_grad():
        ref, ref_feat = model(images), model.forward_features(images)
        for method, kwargs in NO_REDUCTION:
            with apply_vit_reduction(model, method, **kwargs) as handle:
                assert bool(handle.patched_blocks) == (kwargs.get("r") != 0), "patched path runs unless r = 0"
                assert torch.equal(model(images), ref), (method, kwargs)
                assert torch.equal(model.forward_features(images), ref_feat)


def test_identity_with_drop_path_in_training(images: torch.Tensor) -> None:
    model = build("dinov2_reg4", drop_path_rate=0.3).train()
    torch.manual_seed(5)
    ref = model(images)
    with apply_vit_reduction(model, "tome", r=0):
        torch.manual_seed(5)
        assert torch.equal(model(images), ref)
    with apply_vit_reduction(model, "tome", r=8):
        model(images).sum().backward()  # reduced forward stays differentiable
    assert model.blocks[0].attn.qkv.weight.grad is not None


@pytest.mark.parametrize("method,kwargs", REDUCTIONS)
@pytest.mark.parametrize("family", ["deit", "dinov2_reg4", "siglip"])
def test_reduction_counts_and_remove(family: str, method: str, kwargs: dict, images: torch.Tensor) -> None:
    model = build(family)
    keys = list(model.state_dict())
    with torch.no_grad():
        ref = model(images)
        handle = apply_vit_reduction(model, method, **kwargs)
        assert get_vit_reduction(model) is handle and list(model.state_dict()) == keys
        seen: list[int] = []
        hooks = [b.register_forward_pre_hook(lambda m, a: seen.append(a[0].shape[1])) for b in model.blocks]
        feats = model.forward_features(images)
        out = model(images)
        for h in hooks:
            h.remove()
        P = model.num_prefix_tokens
        expected = tokens_per_location(PATCHES + P, method, depth=DEPTH, num_prefix_tokens=P, **kwargs)
        assert seen[:DEPTH] == expected[:-1] and feats.shape[1] == expected[-1] < PATCHES + P
        assert handle.token_counts(PATCHES + P) == expected
        assert not torch.equal(out, ref) and torch.isfinite(out).all()
        handle.remove()
        handle.remove()  # idempotent
        assert get_vit_reduction(model) is None and list(model.state_dict()) == keys
        assert all("forward" not in b.__dict__ for b in model.blocks)
        assert torch.equal(model(images), ref)


@pytest.mark.parametrize("method,kwargs", [("topk", dict(keep_ratio=0.3, reduction_loc=[1])),
                                           ("tome", dict(r=[0, 20])),
                                           ("hquota_ff", dict(keep_ratio=0.5, reduction_loc=[1]))])
@pytest.mark.parametrize("family", ["deit", "dinov2_reg4"])
def test_prefix_tokens_untouched(family: str, method: str, kwargs: dict, images: torch.Tensor) -> None:
    """At the first reducing block the prefix tokens come out as the unpatched block makes them, first."""
    model = build(family)
    P = model.num_prefix_tokens
    with torch.no_grad():
        x = model.blocks[0](model._pos_embed(model.patch_embed(images)))
        ref = model.blocks[1](x)
        with apply_vit_reduction(model, method, **kwargs):
            out = model.blocks[1](x)
    assert out.shape[1] < x.shape[1]
    torch.testing.assert_close(out[:, :P], ref[:, :P], rtol=1e-5, atol=1e-5)


def test_get_intermediate_layers_is_reduced(images: torch.Tensor) -> None:
    """OpenVLA reads features with get_intermediate_layers (tuple in timm 0.9, list in 1.x)."""
    model = build("siglip")
    with torch.no_grad(), apply_vit_reduction(model, "tome", r=10):
        feats = model.get_intermediate_layers(images, n={DEPTH - 2})[0]
    assert feats.shape[1] == tokens_per_location(PATCHES, "tome", r=10, depth=DEPTH, num_prefix_tokens=0)[DEPTH - 1]


def test_create_model_prefix_and_handle() -> None:
    kw = dict(img_size=32, patch_size=4, depth=DEPTH, embed_dim=32, num_heads=2, num_classes=10)
    plain = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kw)
    model = create_model("topk_vit_tiny_patch16_224", keep_ratio=0.25, reduction_loc=[1], **kw)
    assert list(model.state_dict()) == list(plain.state_dict())
    assert model.token_reduction_handle.config.method == "topk"
    merged = create_model("hquota_ff_vit_tiny_patch16_224", r=3, **kw)
    assert merged.token_reduction_handle.config.method == "hquota_ff"
    assert get_vit_reduction(create_model("vit_tiny_patch16_224", **kw)) is None
    with torch.no_grad():
        assert model.forward_features(torch.randn(1, 3, 32, 32)).shape[1] == 1 + math.ceil(0.25 * PATCHES)


BAD = [
    ("topk", dict(keep_ratio=0.0)),
    ("topk", dict(keep_ratio=1.5)),
    ("topk", dict(keep_ratio=-0.2, reduction_loc=[1])),
    ("topk", dict(keep_ratio=0.5, reduction_loc=[DEPTH])),
    ("topk", dict(keep_ratio=0.5, reduction_loc=[-1])),
    ("topk", dict(keep_ratio=[0.5, 0.5], reduction_loc=[1])),
    ("topk", dict(r=4)),
    ("evit", dict(keep_ratio=0.5)),
    ("tome", dict(r=PATCHES // 2 + 1)),
    ("tome", dict(r=[0, 0, PATCHES])),
    ("tome", dict(r=-1)),
    ("tome", dict(r=(40, 0.0))),
    ("tome", dict()),
    ("hquota_ff", dict(keep_ratio=0.5, hub_fraction=1.5)),
]


@pytest.mark.parametrize("method,kwargs", BAD)
def test_bad_arguments_raise(method: str, kwargs: dict) -> None:
    model = build("deit")
    with pytest.raises(ValueError):
        apply_vit_reduction(model, method, **kwargs)
    assert get_vit_reduction(model) is None and all("forward" not in b.__dict__ for b in model.blocks)


def test_double_apply_and_bad_names_raise() -> None:
    model = build("deit")
    with apply_vit_reduction(model, "tome", r=2):
        with pytest.raises(ValueError):
            apply_vit_reduction(model, "topk", keep_ratio=0.5)
    with pytest.raises(ValueError):
        create_model("vit_tiny_patch16_224", keep_ratio=0.5)
    with pytest.raises(ValueError):
        create_model("topk_not_a_timm_model", keep_ratio=0.5)
    with pytest.raises(ValueError):
        apply_vit_reduction(torch.nn.Linear(2, 2), "topk", keep_ratio=0.5)


NO_KERNEL = {"aten._unsafe_view", "aten._reshape_alias", "aten.detach", "aten.alias", "aten.lift_fresh",
             "aten.empty", "aten.empty_strided", "aten.empty_like", "aten.new_empty"}


class _Ops(TorchDispatchMode):
    """Records the aten ops that launch work (views and bare allocations excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        schema_returns = func._schema.returns
        is_view = len(schema_returns) > 0 and all(r.alias_info is not None for r in schema_returns)
        if not is_view and str(func.overloadpacket) not in NO_KERNEL:
            self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _ops(fn: object, *args: torch.Tensor) -> list[str]:
    with torch.no_grad(), _Ops() as rec:
        fn(*args)
    return rec.ops


SYNC_OPS = HOST_SYNC_OPS  # the one list of host-sync operators (prismatic_tr.bench.measure.ops)


@pytest.mark.parametrize("family,extra_ops", [("deit", 7), ("dinov2_reg4", 7), ("siglip", 7)])
def test_topk_adds_few_ops_and_no_host_syncs(family: str, extra_ops: int, images: torch.Tensor) -> None:
    model = build(family)
    with torch.no_grad():  # batch 1: for B > 1 the batched matmul copies the CLS row and k (B, H folded into one dim)
        x = model._pos_embed(model.patch_embed(images[:1]))
    base = _ops(model.blocks[1], x)
    with apply_vit_reduction(model, "topk", keep_ratio=0.5, reduction_loc=[1]):
        reduced = _ops(model.blocks[1], x)
        assert not SYNC_OPS & set(_ops(model, images))
    added = Counter(reduced) - Counter(base)
    # baddbmm (scale folded in), softmax, mean, then pad (prefix kept by an infinite score), topk, sort, gather;
    # without prefix tokens (SigLIP) the mean query replaces the pad
    assert sum(added.values()) == extra_ops, added
    assert not Counter(base) - Counter(reduced)  # the block's own ops (fused attention included) are all still there


@pytest.mark.parametrize("method,kwargs", [("tome", dict(r=8)), ("hquota_ff", dict(keep_ratio=0.5))])
def test_merging_has_no_host_syncs(method: str, kwargs: dict, images: torch.Tensor) -> None:
    model = build("dinov2_reg4")
    with apply_vit_reduction(model, method, **kwargs):
        assert not SYNC_OPS & set(_ops(model, images))


def test_deepcopy_and_existing_instance_forward(images: torch.Tensor) -> None:
    model = build("dinov2_reg4")
    own = model.blocks[2].forward  # a bound method stored on the instance, as other patches do
    model.blocks[2].forward = own
    with torch.no_grad():
        ref = model(images)
        handle = apply_vit_reduction(model, "tome", r=6)
        twin = copy.deepcopy(model)
        assert get_vit_reduction(twin) is not handle and get_vit_reduction(twin).model is twin
        assert torch.equal(twin(images), model(images))
        get_vit_reduction(twin).remove()
        assert torch.equal(twin(images), ref) and get_vit_reduction(model) is handle
        handle.remove()
    assert model.blocks[2].__dict__["forward"] is own and torch.equal(model(images), ref)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method,kwargs", [("topk", dict(keep_ratio=0.5)), ("tome", dict(r=8)),
                                           ("hquota_ff", dict(keep_ratio=0.5))])
def test_no_host_syncs_on_cuda(method: str, kwargs: dict, images: torch.Tensor) -> None:
    model = build("dinov2_reg4").cuda()
    x = images.cuda()
    with torch.no_grad(), apply_vit_reduction(model, method, **kwargs):
        model(x)  # warm-up outside the check
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            model(x)
        finally:
            torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("args,expected", [
    ((197, "topk", 0.7, None, [3, 6, 9], 12, 1), [197] * 4 + [139] * 3 + [98] * 3 + [69] * 3),  # ceil(0.7 * 196) + 1
    ((197, "tome", None, 8, None, 12, 1), [197 - 8 * i for i in range(13)]),
    ((65, "hquota_ff", 0.3, None, [1], 4, 1), [65, 65, 33, 33, 33]),  # 64 -> 20 would merge 44 > 32: capped at half
    ((261, "tome", 0.5, None, [0, 1], 3, 5), [261, 133, 69, 69]),  # DINOv2 reg4: 256 -> 128 -> 64 patches
    ((256, "topk", 0.25, None, [0], 2, 0), [256, 64, 64]),  # SigLIP, no prefix
    ((11, "tome", None, [4, 4, 4], None, 3, 1), [11, 7, 4, 3]),  # r clamped to (N - 1) // 2 as tokens run out
])
def test_tokens_per_location_formula(args: tuple, expected: list[int]) -> None:
    n, method, keep, r, loc, depth, prefix = args
    assert tokens_per_location(n, method, keep_ratio=keep, r=r, reduction_loc=loc, depth=depth,
                               num_prefix_tokens=prefix) == expected


@pytest.mark.parametrize("method,kwargs", [("tome", dict(r=(8, -1))), ("hquota_ff", dict(keep_ratio=0.5))])
def test_bf16_model_keeps_its_dtype_and_exact_sizes(method: str, kwargs: dict, images: torch.Tensor) -> None:
    """Merged tokens stay in the model's dtype; sizes are float32 counts (bf16 holds integers only to 256)."""
    model = build("dinov2_reg4").to(torch.bfloat16)
    seen: list[torch.dtype] = []
    hooks = [b.register_forward_pre_hook(lambda m, a: seen.append(a[0].dtype)) for b in model.blocks]
    with torch.no_grad(), apply_vit_reduction(model, method, **kwargs) as handle:
        out = model.forward_features(images.to(torch.bfloat16))
        size = model.blocks[handle.patched_blocks[0]].__dict__["forward"].state.size
    for h in hooks:
        h.remove()
    assert out.dtype == torch.bfloat16 and set(seen) == {torch.bfloat16} and torch.isfinite(out.float()).all()
    assert size.dtype == torch.float32 and torch.equal(size, size.round())
    assert size.shape == (2, out.shape[1], 1) and size.sum(dim=1).tolist() == [[PATCHES + model.num_prefix_tokens]] * 2
