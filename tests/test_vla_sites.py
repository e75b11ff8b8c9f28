"""The vision and llm sites (and their mix with the projector site) on the native tiny model: shapes and order,
no host syncs, exact undo, bad settings before any change, fullgraph compilation, persistence, and the llm
site's cached decode against a no-cache recomputation of the pruned sequence."""

from __future__ import annotations

import functools

import pytest
import torch

from prismatic_tr.bench.measure.ops import find_host_syncs
from prismatic_tr.llm import prune_index, select_visual, visual_start, visual_token_scores
from prismatic_tr.models import NativeOpenVLA, build_vla, load_vla
from prismatic_tr.reducers import num_kept
from prismatic_tr.reducers.strategies.selection import gather_rows
from prismatic_tr.vit.shared import reduction_block
from prismatic_tr.vla import (
    apply_token_reduction_from_config,
    apply_token_reduction_to_vla,
    get_token_reduction,
    remove_token_reduction,
)
from prismatic_tr.vla.sites import llm_layer

BACKBONES = ["dinosiglip-vit-so-224px", "siglip-vit-so400m"]


@functools.cache
def tiny(backbone: str = "dinosiglip-vit-so-224px") -> NativeOpenVLA:
    return build_vla("tiny", backbone, seed=0)


def make_inputs(vla: NativeOpenVLA, batch: int = 2, length: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vla.vocab_size - 256, (batch, length), generator=gen)
    ids[:, 0] = 1
    channels = 6 if vla.vision_backbone.use_fused_vision_backbone else 3
    return {"input_ids": ids, "pixel_values": torch.randn(batch, channels, 224, 224, generator=gen)}


def snapshot(vla: NativeOpenVLA) -> tuple:
    inp = make_inputs(vla)
    with torch.no_grad():
        out = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3, return_logits=True)
    return (out.logits, dict(vla.state_dict()), type(vla.vision_backbone), dict(vars(vla.vision_backbone)).keys(),
            getattr(vla.config, "token_reduction", "unset"))


def assert_same(before: tuple, after: tuple) -> None:
    assert torch.equal(before[0], after[0])
    assert before[1].keys() == after[1].keys() and all(torch.equal(before[1][k], after[1][k]) for k in before[1])
    assert before[2:] == after[2:]


SETTINGS = [
    dict(site="vision", method="attention", reduction_ratio=0.25, depth_fraction=0.5),
    dict(site="vision", method="norm", reduction_ratio=0.5, depth_fraction=0.3),
    dict(site="llm", reduction_ratio=0.25, depth_fraction=0.5),
    dict(site="llm", reduction_ratio=0.1, depth_fraction=0.5, num_queries=1),
]


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"{s['site']}-{s['reduction_ratio']}")
def test_site_shapes_counts_syncs_and_exact_undo(backbone: str, settings: dict) -> None:
    vla = tiny(backbone)
    before = snapshot(vla)
    inp = make_inputs(vla)
    apply_token_reduction_to_vla(vla, **settings)
    try:
        k = num_kept(256, settings["reduction_ratio"])
        with torch.no_grad():
            projected = vla.embed_images(inp["pixel_values"])
        if settings["site"] == "vision":
            assert projected.shape[1] == k and vla.vision_backbone.get_num_patches() == k
        else:
            assert projected.shape[1] == 256 and vla.vision_backbone.get_num_patches() == 256
        assert find_host_syncs(lambda: vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3)) == {}
        with torch.no_grad():
            reduced = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3, return_logits=True)
        assert not torch.equal(reduced.logits, before[0])
        handle = get_token_reduction(vla, site=settings["site"])
        assert handle is not None and handle.settings.site == settings["site"]
        if settings["site"] == "llm":
            assert handle.last_kept.shape == (2, k) and torch.all(handle.last_kept.diff(dim=1) > 0)
        assert vla.config.token_reduction["site"] == settings["site"]
    finally:
        assert remove_token_reduction(vla) is True
    assert_same(before, snapshot(vla))


def test_vision_site_keeps_the_same_positions_in_both_towers() -> None:
    vla = tiny()
    vb = vla.vision_backbone
    px = make_inputs(vla)["pixel_values"]
    apply_token_reduction_to_vla(vla, site="vision", reduction_ratio=0.25, depth_fraction=0.5)
    try:
        with torch.no_grad():
            out = vb(px)
        idx = get_token_reduction(vla).selection.last_indices
        assert out.shape == (2, 64, vb.embed_dim) and torch.all(idx.diff(dim=1) > 0)  # spatial order kept
        blocks = get_token_reduction(vla).selection.blocks
        assert blocks == [reduction_block(len(t.blocks), 0.5) for t in vb.towers]
    finally:
        remove_token_reduction(vla)
    # the SigLIP half equals running SigLIP's blocks with the same patches gathered after its block
    sig = vb.fused_featurizer
    with torch.no_grad():
        x = sig.norm_pre(sig.patch_drop(sig._pos_embed(sig.patch_embed(px[:, 3:]))))
        for i, block in enumerate(sig.blocks[: len(sig.blocks) - 1]):
            x = block(x)
            if i == blocks[1]:
                x = gather_rows(x, idx, sig.num_prefix_tokens)
    assert torch.equal(out[:, :, vb.featurizer.embed_dim :], x)


def test_llm_site_cached_decode_equals_no_cache_recomputation() -> None:
    vla = tiny()
    inp = make_inputs(vla, length=10)
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
    handle = get_token_reduction(vla, site="llm")
    try:
        with torch.no_grad():
            out = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=4, return_logits=True)
            handle.pruning.force_kept, handle.pruning.prune_uncached = handle.last_kept, True
            logits = vla(input_ids=out.sequences[:, :-1], pixel_values=inp["pixel_values"]).logits
        torch.testing.assert_close(logits[:, -4:].float(), out.logits, rtol=1e-5, atol=1e-5)
    finally:
        remove_token_reduction(vla)


def test_sites_combine_and_persist(tmp_path) -> None:
    vla = build_vla("tiny", seed=1)
    apply_token_reduction_to_vla(vla, site="vision", reduction_ratio=0.5, depth_fraction=0.5)
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.5, depth_fraction=0.5)
    inp = make_inputs(vla)
    with torch.no_grad():
        both = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2, return_logits=True).logits
    assert [d["site"] for d in vla.config.token_reduction] == ["vision", "llm"]
    assert get_token_reduction(vla, site="llm").last_kept.shape == (2, 64)  # half of the vision site's 128
    vla.save_pretrained(tmp_path)
    assert remove_token_reduction(vla, site="llm") and vla.config.token_reduction["site"] == "vision"
    remove_token_reduction(vla)
    assert getattr(vla.config, "token_reduction", None) is None
    loaded, _ = load_vla(tmp_path)
    handle = apply_token_reduction_from_config(loaded)
    assert handle.settings.site == "vision" and get_token_reduction(loaded, site="llm") is not None
    with torch.no_grad():
        again = loaded.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2, return_logits=True).logits
    assert torch.equal(both, again)
    remove_token_reduction(loaded)
    assert loaded.config.token_reduction is None


def test_projector_and_vision_share_a_slot() -> None:
    vla = tiny()
    apply_token_reduction_to_vla(vla, "topk_magnitude", 0.5)
    apply_token_reduction_to_vla(vla, site="vision", reduction_ratio=0.25)
    try:
        assert get_token_reduction(vla).settings.site == "vision" and get_token_reduction(vla, site="projector") is None
        assert len(vla.vision_backbone._forward_hooks) == 0 and vla.vision_backbone.get_num_patches() == 64
    finally:
        remove_token_reduction(vla)


@pytest.mark.parametrize("kwargs, match", [
    (dict(site="vision", method="topk_magnitude"), "method='topk_magnitude' is not allowed at site 'vision'"),
    (dict(site="vision", depth_fraction=1.0), "depth_fraction=1.0"),
    (dict(site="llm", depth_fraction=0.0), "depth_fraction=0.0"),
    (dict(site="llm", reduction_ratio=0.0), "reduction_ratio=0.0"),
    (dict(site="llm", num_queries=0), "num_queries=0"),
    (dict(site="tokens"), "site='tokens'"),
    (dict(site="projector", depth_fraction=0.5), "goes with site"),
])
def test_bad_site_settings_raise_before_any_change(kwargs: dict, match: str) -> None:
    vla = tiny()
    before = snapshot(vla)
    with pytest.raises(ValueError, match=match):
        apply_token_reduction_to_vla(vla, **kwargs)
    assert_same(before, snapshot(vla))


@pytest.mark.parametrize("site", ["vision", "llm"])
def test_sites_compile_fullgraph(site: str) -> None:
    vla = tiny()
    inp = make_inputs(vla, batch=1)
    apply_token_reduction_to_vla(vla, site=site, reduction_ratio=0.25, depth_fraction=0.5)
    try:
        with torch.no_grad():
            if site == "vision":
                fn = vla.vision_backbone.forward
                args: tuple = (inp["pixel_values"],)
            else:
                embeds = torch.randn(1, 280, vla.config.text_config.hidden_size)
                handle = get_token_reduction(vla, site="llm")
                handle.pruning.num_visual = lambda: 256

                def fn(e: torch.Tensor) -> torch.Tensor:
                    pos = torch.arange(e.shape[1])[None]
                    return vla.language_model.model(inputs_embeds=e, position_ids=pos, use_cache=True).last_hidden_state

                args = (embeds,)
            eager = fn(*args)
            compiled = torch.compile(fn, fullgraph=True)(*args)
        assert compiled.shape == eager.shape and (compiled - eager).abs().max() < 1e-4
    finally:
        remove_token_reduction(vla)


def test_pruning_pure_functions() -> None:
    pos = torch.tensor([[0, 0, 0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6, 7, 8]])  # row 0 left-padded by 2
    start = visual_start(pos)
    assert start.tolist() == [3, 1]
    kept = torch.tensor([[0, 2], [1, 3]])  # of K = 4 visual tokens
    index = prune_index(9, start, 4, kept)
    assert index.tolist() == [[0, 1, 2, 3, 5, 7, 8], [0, 2, 4, 5, 6, 7, 8]]
    q, k = torch.randn(2, 3, 2, 8), torch.randn(2, 3, 5, 8)
    scores = visual_token_scores(q, k)
    ref = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, dim=-1).mean(dim=(1, 2))
    torch.testing.assert_close(scores, ref)
    assert select_visual(scores, 0.4).shape == (2, 2)
    assert [llm_layer(8, f) for f in (0.01, 0.25, 0.5, 0.99)] == [1, 2, 4, 7]
    assert [reduction_block(24, f) for f in (0.01, 0.25, 0.5)] == [0, 5, 11]
