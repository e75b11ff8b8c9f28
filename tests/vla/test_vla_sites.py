"""The vision and llm sites (and their mix with the projector site) on the native tiny model: shapes and order,
no host syncs, exact undo, bad settings before any change, fullgraph compilation, persistence, the llm site's
cached decode against a no-cache recomputation of the pruned sequence, and where the llm site must not prune
(plain forwards, labels, OFT) or cannot (static caches, gradient checkpointing), on both stacks and on
OpenVLA's remote code (pins)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers.positions import expected_ids, handbuilt_logits
from helpers.reference_clients import import_openvla_hf
from helpers.reference_models import build_reference_vla
from helpers.tiny_vla import assert_same, make_inputs, snapshot, tiny

from prismatic_tr.bench.measure.ops import find_host_syncs
from prismatic_tr.llm import prune_index, query_index, select_visual, visual_token_scores, visual_window
from prismatic_tr.models import NativeOpenVLA, build_vla, load_vla
from prismatic_tr.reducers import num_kept
from prismatic_tr.reducers.tensor_ops import gather_rows
from prismatic_tr.vit.shared import reduction_block
from prismatic_tr.vla import (
    apply_token_reduction_from_config,
    apply_token_reduction_spec,
    apply_token_reduction_to_vla,
    get_token_reduction,
    reduction_call,
    remove_token_reduction,
)
from prismatic_tr.vla.sites import llm_layer
from prismatic_tr.vla.spec import parse_setting

BACKBONES = ["dinosiglip-vit-so-224px", "siglip-vit-so400m"]


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
        seen: dict[str, torch.Tensor] = {}
        hook = vla.projector.register_forward_hook(lambda m, a, o: seen.__setitem__("projected", o))
        with torch.no_grad(), reduction_call(vla) as call:
            reduced = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3, return_logits=True)
        hook.remove()
        handle = get_token_reduction(vla, site=settings["site"])
        assert handle is not None and handle.settings.site == settings["site"]
        if settings["site"] == "llm":
            assert call.llm_kept.shape == (2, k) and torch.all(call.llm_kept.diff(dim=1) > 0)
            # the decode over the pruned cache equals recomputing the pruned sequence without a cache
            handle.pruning.force_kept, handle.pruning.prune_uncached = call.llm_kept, True
            with torch.no_grad():
                again = vla(input_ids=reduced.sequences[:, :-1], pixel_values=inp["pixel_values"]).logits
            torch.testing.assert_close(again[:, -3:].float(), reduced.logits, rtol=1e-5, atol=1e-5)
        else:  # the first action token's logits are the language model's on [BOS, kept patches, prompt]
            kept = call.kept
            ref = handbuilt_logits(vla.language_model, vla.get_input_embeddings(), inp["input_ids"],
                                   seen["projected"], expected_ids(kept, 256, k, inp["input_ids"].shape[1] - 1))
            torch.testing.assert_close(reduced.logits[:, 0], ref[:, -1].float(), rtol=1e-5, atol=1e-5)
        assert vla.config.token_reduction["site"] == settings["site"]
    finally:
        assert remove_token_reduction(vla) is True
    assert_same(before, snapshot(vla))


def test_vision_site_keeps_the_same_positions_in_both_towers() -> None:
    vla = tiny()
    vb = vla.vision_backbone
    px = make_inputs(vla)["pixel_values"]
    # a selecting method: the SigLIP half is compared with its blocks run on the gathered patches alone
    apply_token_reduction_to_vla(vla, site="vision", method="diverse", reduction_ratio=0.25, depth_fraction=0.5)
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            out = vb(px)
        idx = call.kept
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


def test_vision_site_merging_weighs_a_group_as_its_copies_in_the_towers() -> None:
    """``vision:diverse_merge``: where the cut block's patch rows come in 64 groups of identical rows, 32 of 2 then
    32 of 6 (a hook set before the site's makes them so, in both towers), merging each group into one token and
    weighing it as its rows in the later blocks' attention gives the unreduced towers' output at the kept patches
    (to float32 rounding); the same selection without merging (``diverse``, which keeps one row of each group too)
    does not. Group sizes in the record; no host sync; the attention modules as they were after removal."""
    vla = tiny()
    vb = vla.vision_backbone
    px = make_inputs(vla)["pixel_values"]
    blocks = [reduction_block(len(t.blocks), 0.25) for t in vb.towers]
    group_sizes = torch.tensor([2] * 32 + [6] * 32)
    group = torch.arange(64).repeat_interleave(group_sizes)  # (256,) the group of each patch, contiguous
    first = torch.cumsum(group_sizes, 0) - group_sizes       # each group's first patch

    def groups(tower: torch.nn.Module) -> Any:
        p = tower.num_prefix_tokens

        def hook(module: torch.nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
            copies = out[:, p:][:, first[group]]  # every patch a copy of its group's first
            return torch.cat([out[:, :p], copies], dim=1)

        return hook

    hooks = [t.blocks[j].register_forward_hook(groups(t)) for t, j in zip(vb.towers, blocks, strict=True)]
    try:
        with torch.no_grad():
            unreduced = vb(px)
        out = {}
        for spec in ("vision:diverse_merge:0.25@0.25", "vision:diverse:0.25@0.25"):
            apply_token_reduction_spec(vla, spec)
            try:
                with torch.no_grad(), reduction_call(vla) as call:
                    out[spec] = (vb(px), call.kept, call.sizes)
                if "merge" in spec:
                    assert find_host_syncs(lambda: vb(px)) == {}
            finally:
                remove_token_reduction(vla)
    finally:
        for h in hooks:
            h.remove()
    merged, kept, sizes = out["vision:diverse_merge:0.25@0.25"]
    assert torch.equal(group[kept], torch.arange(64).expand(2, -1))  # one patch of each group kept
    assert torch.equal(sizes, group_sizes.float().expand(2, -1))
    torch.testing.assert_close(merged, gather_rows(unreduced, kept), rtol=1e-4, atol=1e-4)
    selected, kept_too, none = out["vision:diverse:0.25@0.25"]
    assert torch.equal(kept_too, kept) and none is None
    assert (selected - gather_rows(unreduced, kept)).abs().max() > 1e-3
    assert all("forward" not in blk.attn.__dict__ for t in vb.towers for blk in t.blocks)


@pytest.mark.parametrize("method", ["saliency", "diverse"])
def test_vision_site_scores_with_a_reducers_strategy_on_the_cut_blocks_output(method: str) -> None:
    """A registered selection strategy at the vision site keeps exactly what it keeps on the scoring tower's
    patch tokens after the cut block (prefix dropped)."""
    from prismatic_tr.reducers import TokenReducer

    vla = tiny()
    vb = vla.vision_backbone
    px = make_inputs(vla)["pixel_values"]
    dino = vb.featurizer
    block = reduction_block(len(dino.blocks), 0.5)
    with torch.no_grad():
        x = dino.norm_pre(dino.patch_drop(dino._pos_embed(dino.patch_embed(px[:, :3]))))
        for b in dino.blocks[: block + 1]:
            x = b(x)
        reducer = TokenReducer(method=method, keep_ratio=0.25, num_prefix_tokens=dino.num_prefix_tokens)
        expected = reducer.reduce(x).indices
    apply_token_reduction_to_vla(vla, method, 0.25, site="vision", depth_fraction=0.5)
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            vb(px)
        assert torch.equal(call.kept, expected)
        assert vla.config.token_reduction["method"] == method
    finally:
        remove_token_reduction(vla)


def test_vision_site_keyed_merge_covers_the_next_blocks_keys_and_groups_the_tokens() -> None:
    """``vision:diverse_merge_keys``: the kept patches are ``diverse``'s cover of the keys the next block's attention
    computes from the cut block's output (not of the tokens, which it covers differently here), and every patch joins
    the kept one nearest to it in the tokens, as ``diverse_merge``'s groups; the sizes count those groups; no host sync;
    nothing left on the towers after removal."""
    from prismatic_tr.reducers import TokenReducer
    from prismatic_tr.reducers.strategies.diverse_merge import nearest_owner
    from prismatic_tr.vit.shared import next_block_keys

    vla = tiny()
    vb = vla.vision_backbone
    px = make_inputs(vla)["pixel_values"]
    dino = vb.featurizer
    block, p = reduction_block(len(dino.blocks), 0.25), dino.num_prefix_tokens
    with torch.no_grad():
        x = dino.norm_pre(dino.patch_drop(dino._pos_embed(dino.patch_embed(px[:, :3]))))
        for b in dino.blocks[: block + 1]:
            x = b(x)
        cover = TokenReducer(method="diverse", keep_ratio=0.25, num_prefix_tokens=p)
        on_keys = cover.reduce(next_block_keys(dino, block, x)).indices
        on_tokens = cover.reduce(x).indices
        owner = nearest_owner(x[:, p:], on_keys)
    assert not torch.equal(on_keys, on_tokens)
    before = snapshot(vla)
    apply_token_reduction_spec(vla, "vision:diverse_merge_keys:0.25@0.25")
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            out = vb(px)
        assert torch.equal(call.kept, on_keys)
        want = torch.stack([torch.bincount(o, minlength=on_keys.shape[1]) for o in owner]).float()
        assert torch.equal(call.sizes, want)
        assert out.shape[1] == on_keys.shape[1]
        assert find_host_syncs(lambda: vb(px)) == {}
    finally:
        remove_token_reduction(vla)
    assert_same(before, snapshot(vla))
    assert all("forward" not in blk.attn.__dict__ for t in vb.towers for blk in t.blocks)


def test_keyed_merge_is_a_vision_site_method_and_stays_off_the_llm_site() -> None:
    """``diverse_merge_keys`` reads a tower's next block, so the projector site refuses it by name; like every merge
    it cannot be combined with the llm site, which would drop tokens that stand for several patches."""
    with pytest.raises(ValueError, match="diverse_merge_keys"):
        parse_setting("diverse_merge_keys:0.25")
    with pytest.raises(ValueError, match="'diverse_merge_keys' weighs its merged tokens"):
        parse_setting("vision:diverse_merge_keys:0.25@0.25+llm:attention:0.5@0.25")
    assert parse_setting("vision:diverse_merge_keys:0.25@0.25").label == "vision:diverse_merge_keys:0.25@0.25"


def backbone_kept(vla: NativeOpenVLA, px: torch.Tensor, before: Any = None) -> torch.Tensor:
    """Where the tokens a backbone call passes on sat (one call of its own); ``before()`` runs first."""
    if before is not None:
        before()
    with reduction_call(vla) as call:
        vla.vision_backbone(px)
    return call.kept


def test_vision_site_random_draws_again_after_reseed() -> None:
    vla = tiny()
    px = make_inputs(vla)["pixel_values"]
    apply_token_reduction_to_vla(vla, "random", 0.25, site="vision", depth_fraction=0.5, seed=3)
    handle = get_token_reduction(vla)
    try:
        with torch.no_grad():
            first, second, again = (backbone_kept(vla, px, handle.reseed if i == 2 else None) for i in range(3))
    finally:
        remove_token_reduction(vla)
    assert not torch.equal(first, second) and torch.equal(first, again)
    assert torch.all(first.diff(dim=1) > 0)


def test_llm_site_cached_decode_equals_no_cache_recomputation() -> None:
    vla = tiny()
    inp = make_inputs(vla, length=10)
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
    handle = get_token_reduction(vla, site="llm")
    try:
        with torch.no_grad():
            with reduction_call(vla) as call:
                out = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=4, return_logits=True)
            handle.pruning.force_kept, handle.pruning.prune_uncached = call.llm_kept, True
            logits = vla(input_ids=out.sequences[:, :-1], pixel_values=inp["pixel_values"]).logits
        torch.testing.assert_close(logits[:, -4:].float(), out.logits, rtol=1e-5, atol=1e-5)
    finally:
        remove_token_reduction(vla)


def test_sites_combine_and_persist(tmp_path) -> None:
    vla = build_vla("tiny", seed=1)
    apply_token_reduction_to_vla(vla, site="vision", reduction_ratio=0.5, depth_fraction=0.5)
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.5, depth_fraction=0.5)
    inp = make_inputs(vla)
    with torch.no_grad(), reduction_call(vla) as call:
        both = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2, return_logits=True).logits
    assert [d["site"] for d in vla.config.token_reduction] == ["vision", "llm"]
    assert call.llm_kept.shape == (2, 64)  # half of the vision site's 128
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
        assert len(vla.vision_backbone._forward_hooks) == 1  # the vision site's own; the projector's is gone
        assert vla.vision_backbone.get_num_patches() == 64
    finally:
        remove_token_reduction(vla)


@pytest.mark.parametrize("kwargs, match", [
    (dict(site="vision", method="spatial_pool"), "method='spatial_pool' is not allowed at site 'vision'"),
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
    # the default vision method (diverse) unrolls its K greedy steps: a small keep keeps the compile short
    apply_token_reduction_to_vla(vla, site=site, reduction_ratio=0.05 if site == "vision" else 0.25,
                                 depth_fraction=0.5)
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
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1, 1]])  # row 0 left-padded by 2
    start, last = visual_window(mask, 2, 9, torch.device("cpu"))
    assert start.tolist() == [3, 1] and last.tolist() == [8, 8]
    right = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0, 0]])  # right-padded: the last real token is at 5
    assert [t.tolist() for t in visual_window(right, 1, 9, torch.device("cpu"))] == [[1], [5]]
    assert [t.tolist() for t in visual_window(None, 2, 9, torch.device("cpu"))] == [[1, 1], [8, 8]]
    # queries: each row's last 3 real positions, never a visual one (row 1 has a single text token)
    assert query_index(torch.tensor([1, 1]), torch.tensor([8, 5]), 4, 3).tolist() == [[6, 7, 8], [5, 5, 5]]
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


# --- the llm site touches only generation (issue 20) ---


def labelled_inputs(vla: NativeOpenVLA) -> dict[str, torch.Tensor]:
    inp = make_inputs(vla)
    mask = torch.ones_like(inp["input_ids"])
    mask[1, -3:] = 0  # a right-padded row, as OpenVLA's collator makes
    labels = inp["input_ids"].masked_fill(mask == 0, -100)
    return {**inp, "attention_mask": mask, "labels": labels}


def test_llm_site_leaves_forwards_with_labels_exactly_unreduced() -> None:
    vla = tiny()
    inp = labelled_inputs(vla)
    with torch.no_grad():
        before = vla(**inp)
        with_site = []
        apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
        try:
            with_site.append(vla(**inp))
            with_site.append(vla(**{k: v for k, v in inp.items() if k != "labels"}))  # teacher forcing
        finally:
            remove_token_reduction(vla)
    for out in with_site:
        assert out.logits.shape == before.logits.shape and torch.equal(out.logits, before.logits)
    assert torch.equal(with_site[0].loss, before.loss)


def test_llm_site_refuses_labels_with_a_cache_and_training_with_checkpointing() -> None:
    vla = build_vla("tiny", seed=2)
    inp = labelled_inputs(vla)
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
    try:
        with pytest.raises(ValueError, match="labels and a KV cache"):
            vla.language_model(inputs_embeds=torch.randn(2, 5, 64), labels=torch.zeros(2, 5, dtype=torch.long),
                               use_cache=True)
        vla.train()
        vla.gradient_checkpointing_enable()
        with pytest.raises(ValueError, match="gradient checkpointing"):
            vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2)
    finally:
        remove_token_reduction(vla)


class OddCache:
    """A cache whose length is not readable from shapes (as a static cache's)."""


def test_llm_site_refuses_a_cache_it_cannot_measure() -> None:
    vla = tiny()
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
    try:
        from prismatic_tr.models.generation import CACHE_NAME

        with pytest.raises(ValueError, match="dynamic KV cache"):
            vla.language_model.model(inputs_embeds=torch.randn(1, 5, 64), use_cache=True, **{CACHE_NAME: OddCache()})
    finally:
        remove_token_reduction(vla)


def test_llm_site_padded_batch_equals_each_row_alone() -> None:
    """Rows of different lengths (padded) keep the visual tokens and logits each row gets alone."""
    vla = tiny()
    inp = make_inputs(vla, batch=2, length=12)
    mask = torch.ones_like(inp["input_ids"])
    mask[0, -4:] = 0
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
    try:
        with torch.no_grad():
            with reduction_call(vla) as call:
                both = vla.generate(inp["input_ids"], inp["pixel_values"], attention_mask=mask, max_new_tokens=3,
                                    return_logits=True)
            kept_both = call.llm_kept
            for row, length in ((0, 8), (1, 12)):
                with reduction_call(vla) as call:
                    alone = vla.generate(inp["input_ids"][row : row + 1, :length],
                                         inp["pixel_values"][row : row + 1], max_new_tokens=3, return_logits=True)
                assert torch.equal(call.llm_kept[0], kept_both[row])
                torch.testing.assert_close(both.logits[row], alone.logits[0], rtol=1e-4, atol=1e-4)
    finally:
        remove_token_reduction(vla)


def test_llm_site_hands_pruned_layers_gap_free_ids_where_rotary_comes_in() -> None:
    """transformers 5 hands each layer its rotary embedding; the pruned layers' position ids then only mark
    packed sequences for FlashAttention-2, so they must be gap-free there. transformers 4.40 computes rotary
    from the ids inside the layer: they stay the kept tokens' own ids."""
    vla = tiny()
    inp = make_inputs(vla, batch=1)
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
    seen: dict[str, object] = {}
    layer = vla.language_model.model.layers[get_token_reduction(vla, site="llm").layer]
    hook = layer.register_forward_pre_hook(lambda m, a, kw: seen.setdefault("kw", kw) and None, with_kwargs=True)
    try:
        with torch.no_grad():
            vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=1)
    finally:
        hook.remove()
        remove_token_reduction(vla)
    ids = seen["kw"]["position_ids"]
    assert ids.shape[-1] == 1 + 64 + inp["input_ids"].shape[1] - 1  # BOS, kept visual tokens, the prompt after BOS
    if seen["kw"].get("position_embeddings") is not None:
        assert torch.equal(ids[0], torch.arange(ids.shape[-1]))
    else:
        assert bool((ids.diff(dim=-1) > 1).any())  # the dropped visual tokens leave gaps


def test_llm_site_on_remote_code_prunes_generate_only() -> None:
    modeling = import_openvla_hf("modeling_prismatic")
    configuration = import_openvla_hf("configuration_prismatic")
    vla = build_reference_vla(modeling, configuration)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 29000, (2, 10), generator=g)
    ids[:, 0] = 1
    px = torch.randn(2, 6, 224, 224, generator=g)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        before = vla(input_ids=ids, attention_mask=mask, pixel_values=px, labels=ids)
        apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
        try:
            with reduction_call(vla) as call:
                after = vla(input_ids=ids, attention_mask=mask, pixel_values=px, labels=ids)
            assert call.llm_kept is None  # nothing pruned in a plain forward
            with reduction_call(vla) as call:
                gen = vla.generate(ids[:1], pixel_values=px[:1], attention_mask=mask[:1], max_new_tokens=3,
                                   do_sample=False)
            assert call.llm_kept is not None and call.llm_kept.shape == (1, 64)
            assert gen.shape == (1, 13)
        finally:
            remove_token_reduction(vla)
    assert torch.equal(after.logits, before.logits) and torch.equal(after.loss, before.loss)


def test_llm_site_on_a_peft_model_leaves_training_forwards_alone() -> None:
    peft = pytest.importorskip("peft")
    vla = build_vla("tiny", seed=3)
    inp = labelled_inputs(vla)
    wrapped = peft.get_peft_model(vla, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        before = wrapped(**inp)
        apply_token_reduction_to_vla(wrapped, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
        try:
            after = wrapped(**inp)
            with reduction_call(wrapped) as call:
                gen = wrapped.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2)
            assert call.llm_kept.shape == (2, 64) and gen.shape == (2, 14)
        finally:
            remove_token_reduction(wrapped)
    assert torch.equal(after.loss, before.loss)


def test_each_site_says_where_it_cuts_in_blocks_and_layers_actually_run() -> None:
    from prismatic_tr.vla import reduction_cut

    vla = build_vla("policy", seed=0)  # towers 6 deep (5 run), a Llama 4 deep
    assert reduction_cut(vla) == "none"
    apply_token_reduction_to_vla(vla, "norm", 0.25, site="vision", depth_fraction=0.25)
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.5, depth_fraction=0.25)
    try:
        # 0.25 of 5 blocks rounds up to a cut after block 2: 40 % of the towers, not a quarter
        assert reduction_cut(vla) == "towers after 2/5, 2/5 blocks; LLM after 1/4 layers"
        apply_token_reduction_to_vla(vla, "random", 0.5)
        assert reduction_cut(vla) == "after the backbone; LLM after 1/4 layers"
    finally:
        remove_token_reduction(vla)
