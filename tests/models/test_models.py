"""Tests of the native OpenVLA model (tiny preset), its processor, action tokenizer and loading."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils._python_dispatch import TorchDispatchMode

from prismatic_tr.models import (
    IGNORE_INDEX,
    PRESETS,
    VISION_BACKBONE_IDS,
    VISION_BACKBONES,
    ActionTokenizer,
    OpenVLAAdapter,
    PrismaticProcessor,
    ReferenceOpenVLA,
    build_processor,
    build_prompt,
    build_vla,
    load_vla,
    make_config,
    normalize_actions,
    unnormalize_actions,
)
from prismatic_tr.models.generation import decode_mask, to_right_padding
from prismatic_tr.models.tokenizer import _corpus, build_tokenizer

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # DINOv2's normalisation

BACKBONES = sorted(VISION_BACKBONE_IDS)


@functools.cache
def tiny_vla(backbone: str) -> ReferenceOpenVLA:
    """One shared tiny model per backbone (tests must leave it as they found it)."""
    return build_vla("tiny", backbone, dtype=torch.float32, seed=0)


@pytest.fixture(params=BACKBONES)
def tiny(request: pytest.FixtureRequest) -> ReferenceOpenVLA:
    return tiny_vla(request.param)


@pytest.fixture
def fused() -> ReferenceOpenVLA:
    return tiny_vla("dinosiglip-vit-so-224px")


def channels(vla: ReferenceOpenVLA) -> int:
    return 6 if vla.vision_backbone.use_fused_vision_backbone else 3


def make_inputs(
    vla: ReferenceOpenVLA, batch: int = 2, length: int = 12, seed: int = 0
) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vla.vocab_size - 256, (batch, length), generator=gen)
    ids[:, 0] = 1
    px = torch.randn(batch, channels(vla), 224, 224, generator=gen)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": px}


def count_calls(module: torch.nn.Module) -> tuple[list[int], torch.utils.hooks.RemovableHandle]:
    calls: list[int] = []
    return calls, module.register_forward_hook(lambda *_: calls.append(1))


# --- vision backbone and projector ---


def test_vision_features_geometry(tiny: ReferenceOpenVLA) -> None:
    vb = tiny.vision_backbone
    feats = vb(torch.randn(2, channels(tiny), 224, 224))
    widths = vb.featurizer.embed_dim + (
        vb.fused_featurizer.embed_dim if vb.fused_featurizer is not None else 0
    )
    assert feats.shape == (2, 256, vb.embed_dim) and vb.embed_dim == widths
    assert vb.get_num_patches() == 256 and vb.get_num_images_in_input() == 1
    assert (vb.fused_featurizer is not None) == vb.use_fused_vision_backbone == (channels(tiny) == 6)
    assert not hasattr(vb, "num_patches")


def test_featurizer_returns_penultimate_block_patches(fused: ReferenceOpenVLA) -> None:
    """The tower stops after block depth - 2 and equals OpenVLA's get_intermediate_layers bit for bit."""
    from prismatic_tr.vit.penultimate import penultimate_patch_features

    for vit in (fused.vision_backbone.featurizer, fused.vision_backbone.fused_featurizer):
        img = torch.randn(2, 3, 224, 224)
        calls, handle = count_calls(vit.blocks[-1])
        try:
            with torch.no_grad():
                ours = vit(img)
            assert calls == []  # the last block's output is discarded by OpenVLA: it never runs here
            with torch.no_grad():
                upstream = vit.get_intermediate_layers(img, n={len(vit.blocks) - 2})[0]
                assert torch.equal(penultimate_patch_features(vit, img, run_last_block=True), upstream)
            assert len(calls) == 2
        finally:
            handle.remove()
        assert torch.equal(ours, upstream)


def test_fused_backbone_splits_channels(fused: ReferenceOpenVLA) -> None:
    vb, px = fused.vision_backbone, torch.randn(1, 6, 224, 224)
    expected = torch.cat([vb.featurizer(px[:, :3]), vb.fused_featurizer(px[:, 3:])], dim=2)
    torch.testing.assert_close(vb(px), expected)


@pytest.mark.parametrize("k", [256, 64, 1])
def test_projector_any_token_count(tiny: ReferenceOpenVLA, k: int) -> None:
    out = tiny.projector(torch.randn(2, k, tiny.vision_backbone.embed_dim))
    assert out.shape == (2, k, tiny.config.text_config.hidden_size)


# --- forward ---


def test_build_multimodal_inputs_layout(tiny: ReferenceOpenVLA) -> None:
    inp = make_inputs(tiny, batch=2, length=9)
    mask = inp["attention_mask"].clone()
    mask[1, -3:] = 0
    labels = inp["input_ids"].clone()
    projected = tiny.embed_images(inp["pixel_values"])
    k = projected.shape[1]
    embeds, mm_mask, mm_labels = tiny.build_multimodal_inputs(inp["input_ids"], mask, projected, labels)
    text = tiny.get_input_embeddings()(inp["input_ids"])
    assert embeds.shape == (2, 9 + k, projected.shape[2])
    assert torch.equal(embeds[:, 0], text[:, 0]) and torch.equal(embeds[:, 1 : 1 + k], projected)
    assert torch.equal(embeds[:, 1 + k :], text[:, 1:])
    assert torch.equal(mm_mask, torch.cat([mask[:, :1], torch.ones(2, k, dtype=mask.dtype), mask[:, 1:]], 1))
    assert torch.equal(mm_labels[:, 1 : 1 + k], torch.full((2, k), IGNORE_INDEX))
    assert torch.equal(mm_labels[:, :1], labels[:, :1]) and torch.equal(mm_labels[:, 1 + k :], labels[:, 1:])


def test_forward_loss_masks_patch_positions(tiny: ReferenceOpenVLA) -> None:
    inp = make_inputs(tiny, batch=2, length=10)
    labels = inp["input_ids"].clone()
    labels[:, :4] = IGNORE_INDEX
    out = tiny(**inp, labels=labels)
    k = out.projector_features.shape[1]
    assert out.logits.shape == (2, 10 + k, tiny.config.text_config.vocab_size)
    full = torch.cat([labels[:, :1], torch.full((2, k), IGNORE_INDEX), labels[:, 1:]], dim=1)
    expected = F.cross_entropy(
        out.logits[:, :-1].flatten(0, 1), full[:, 1:].flatten(), ignore_index=IGNORE_INDEX
    )
    assert torch.isfinite(out.loss)
    torch.testing.assert_close(out.loss, expected)


class _SyncCounter(TorchDispatchMode):
    """Counts ops that force a device-to-host sync."""

    SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "item"})

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func.overloadpacket.__name__ in self.SYNC_OPS:
            self.syncs.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_multimodal_inputs_without_host_syncs(fused: ReferenceOpenVLA) -> None:
    inp = make_inputs(fused, batch=2)
    inp["attention_mask"][1, -2:] = 0
    with torch.no_grad(), _SyncCounter() as counter:
        projected = fused.embed_images(inp["pixel_values"])
        fused.build_multimodal_inputs(inp["input_ids"], inp["attention_mask"], projected, inp["input_ids"])
        key_mask, _ = to_right_padding(inp["attention_mask"], projected)
        decode_mask(key_mask.bool(), projected.dtype)
    assert counter.syncs == []


def test_text_only_forward(tiny: ReferenceOpenVLA) -> None:
    inp = make_inputs(tiny, batch=1, length=7)
    out = tiny(input_ids=inp["input_ids"], attention_mask=inp["attention_mask"])
    assert out.logits.shape == (1, 7, tiny.config.text_config.vocab_size) and out.projector_features is None


# --- generation ---


def test_generate_matches_uncached_forward(tiny: ReferenceOpenVLA) -> None:
    inp = make_inputs(tiny, batch=2, length=8)
    gen = tiny.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2, return_logits=True)
    assert gen.sequences.shape == (2, 10) and gen.logits.shape == (2, 2, tiny.config.text_config.vocab_size)
    assert torch.equal(gen.sequences[:, :8], inp["input_ids"])
    with torch.no_grad():
        for step in range(2):
            ids = gen.sequences[:, : 8 + step]
            ref = tiny(input_ids=ids, pixel_values=inp["pixel_values"]).logits[:, -1].float()
            torch.testing.assert_close(gen.logits[:, step], ref, rtol=1e-4, atol=1e-4)
            assert torch.equal(gen.sequences[:, 8 + step], ref.argmax(-1))


@pytest.mark.parametrize("side", ["left", "right"])
def test_generate_padded_batch_matches_single(fused: ReferenceOpenVLA, side: str) -> None:
    a, b = make_inputs(fused, 1, 10, seed=1), make_inputs(fused, 1, 6, seed=2)
    pad = torch.full((1, 4), fused.pad_token_id)
    zeros = torch.zeros(1, 4, dtype=torch.long)
    ids_b = torch.cat([pad, b["input_ids"]], 1) if side == "left" else torch.cat([b["input_ids"], pad], 1)
    mask_b = (
        torch.cat([zeros, b["attention_mask"]], 1)
        if side == "left"
        else torch.cat([b["attention_mask"], zeros], 1)
    )
    batch = fused.generate(
        torch.cat([a["input_ids"], ids_b]),
        torch.cat([a["pixel_values"], b["pixel_values"]]),
        attention_mask=torch.cat([a["attention_mask"], mask_b]),
        max_new_tokens=3,
        return_logits=True,
    )
    for row, single in enumerate((a, b)):
        ref = fused.generate(
            single["input_ids"], single["pixel_values"], max_new_tokens=3, return_logits=True
        )
        torch.testing.assert_close(batch.logits[row], ref.logits[0], rtol=1e-4, atol=1e-4)
        assert torch.equal(batch.sequences[row, -3:], ref.sequences[0, -3:])


def test_sampling_is_reproducible_from_generator(fused: ReferenceOpenVLA) -> None:
    inp = make_inputs(fused, batch=2)
    draw = lambda seed: fused.generate(  # noqa: E731
        inp["input_ids"],
        inp["pixel_values"],
        max_new_tokens=3,
        do_sample=True,
        temperature=5.0,
        generator=torch.Generator().manual_seed(seed),
    )
    first = draw(0)
    assert torch.equal(first, draw(0))
    assert any(not torch.equal(first, draw(s)) for s in range(1, 4))
    with pytest.raises(ValueError, match="temperature"):
        fused.generate(inp["input_ids"], inp["pixel_values"], do_sample=True, temperature=0.0)


def test_image_changes_first_step_logits(tiny: ReferenceOpenVLA) -> None:
    inp = make_inputs(tiny, batch=1, length=8)
    other = torch.randn_like(inp["pixel_values"])
    run = lambda px: tiny.generate(inp["input_ids"], px, max_new_tokens=1, return_logits=True).logits  # noqa: E731
    assert torch.equal(run(inp["pixel_values"]), run(inp["pixel_values"]))
    assert (run(inp["pixel_values"]) - run(other)).abs().max() > 1e-4


@pytest.mark.parametrize("batch", [1, 2])
def test_backbone_runs_once_per_call(tiny: ReferenceOpenVLA, batch: int) -> None:
    inp = make_inputs(tiny, batch=batch)
    calls, handle = count_calls(tiny.vision_backbone)
    try:
        tiny.predict_action(**inp, unnorm_key="bridge_orig")
        assert len(calls) == 1
        tiny.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=4)
        assert len(calls) == 2
    finally:
        handle.remove()


@pytest.mark.parametrize(
    "backbone, keep",
    [("dinosiglip-vit-so-224px", 64), ("siglip-vit-so400m", 1), ("dinosiglip-vit-so-224px", 255)],
)
def test_reduced_visual_tokens_via_hook(backbone: str, keep: int) -> None:
    tiny = tiny_vla(backbone)
    inp = make_inputs(tiny, batch=2, length=9)
    handle = tiny.vision_backbone.register_forward_hook(lambda m, args, out: out[:, :: 256 // keep][:, :keep])
    try:
        out = tiny(**inp, labels=inp["input_ids"])
        assert out.projector_features.shape[1] == keep and out.logits.shape[1] == 9 + keep
        assert torch.isfinite(out.loss)
        gen = tiny.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2, return_logits=True)
        reduced_logits = gen.logits
        assert tiny.predict_action(**inp).shape == (2, 7)
    finally:
        handle.remove()
    full = tiny.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2, return_logits=True)
    assert tiny(**inp).projector_features.shape[1] == 256
    assert not torch.equal(full.logits, reduced_logits)


# --- actions ---


def test_predict_action_decodes_generated_tokens(fused: ReferenceOpenVLA) -> None:
    inp = make_inputs(fused, batch=2)
    actions = fused.predict_action(**inp, unnorm_key="bridge_orig")
    ids = fused.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=7)[:, -7:].numpy()
    stats = fused.get_action_stats("bridge_orig")
    expected = unnormalize_actions(fused.action_tokenizer.decode_token_ids_to_actions(ids), stats)
    assert actions.shape == (2, 7) and np.allclose(actions, expected)
    low, high, mask = (np.asarray(stats[k]) for k in ("q01", "q99", "mask"))
    assert np.all((actions[:, mask] >= low[mask] - 1e-9) & (actions[:, mask] <= high[mask] + 1e-9))
    single = fused.predict_action(**{k: v[:1] for k, v in inp.items()})
    assert single.shape == (7,) and np.allclose(single, actions[0])
    assert fused.get_action_dim() == 7


@pytest.mark.parametrize("as_torch", [False, True])
def test_action_tokenizer_round_trip(as_torch: bool) -> None:
    at = ActionTokenizer(1024)
    actions = np.random.default_rng(0).uniform(-1, 1, size=(5, 7))
    actions[0, :3] = [-1.0, 1.0, 0.0]
    x = torch.from_numpy(actions) if as_torch else actions
    ids = at.encode(x)
    decoded = np.asarray(at.decode_token_ids_to_actions(ids), dtype=np.float64)
    ids = np.asarray(ids)
    assert ids.min() >= 1024 - 256 and ids.max() <= 1023 and ids[0, 0] == 1023 and ids[0, 1] == 1024 - 256
    assert np.abs(decoded - actions).max() <= (2.0 / 255) + 1e-6
    assert np.array_equal(ids, at.encode(actions))  # numpy and torch agree


@pytest.mark.parametrize("as_torch", [False, True])
def test_normalize_unnormalize(as_torch: bool) -> None:
    stats = {"q01": [-2.0, 0.0, 5.0], "q99": [2.0, 1.0, 7.0], "mask": [True, True, False]}
    raw = np.array([[0.0, 0.25, 9.0], [3.0, 1.0, -4.0]])
    x = torch.from_numpy(raw) if as_torch else raw
    norm = np.asarray(normalize_actions(x, stats))
    assert np.allclose(
        norm, [[0.0, -0.5, 9.0], [1.0, 1.0, -4.0]]
    )  # clipped to [-1, 1]; unmasked dim untouched
    back = np.asarray(unnormalize_actions(torch.from_numpy(norm) if as_torch else norm, {"action": stats}))
    assert np.allclose(back, [[0.0, 0.25, 9.0], [2.0, 1.0, -4.0]])


# --- persistence, processor, loading ---


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_save_load_round_trip(tmp_path, dtype: torch.dtype) -> None:
    vla = build_vla("tiny", "siglip-vit-so400m", dtype=dtype, seed=3)
    vla.config.token_reduction = {"method": "topk_magnitude", "reduction_ratio": 0.5, "seed": 0}
    processor = build_processor(vla.config)
    vla.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    loaded, loaded_proc = load_vla(tmp_path)
    assert loaded.dtype == dtype and loaded.config.token_reduction == vla.config.token_reduction
    assert loaded.norm_stats == vla.norm_stats and loaded.state_dict().keys() == vla.state_dict().keys()
    inp = loaded_proc(build_prompt("wipe the table"), Image.new("RGB", (64, 48), (10, 200, 30)))
    assert all(
        torch.equal(inp[k], v)
        for k, v in processor(
            build_prompt("wipe the table"), Image.new("RGB", (64, 48), (10, 200, 30))
        ).items()
    )
    with torch.no_grad():
        assert torch.equal(vla(**inp).logits, loaded(**inp).logits)
    assert np.array_equal(vla.predict_action(**inp), loaded.predict_action(**inp))


@pytest.mark.parametrize("backbone", BACKBONES)
def test_processor_outputs(backbone: str) -> None:
    config = make_config("tiny", backbone)
    proc = build_processor(config)
    gray = np.full((50, 80, 3), 128, dtype=np.uint8)
    out = proc(
        [build_prompt("open the drawer"), build_prompt("put the spoon in the pot")],
        [gray, Image.fromarray(gray)],
    )
    n_ch = 6 if config.use_fused_vision_backbone else 3
    assert out["pixel_values"].shape == (2, n_ch, 224, 224) and torch.equal(
        out["pixel_values"][0], out["pixel_values"][1]
    )
    assert out["input_ids"].shape == out["attention_mask"].shape and torch.all(out["input_ids"][:, 0] == 1)
    expected_siglip = (128 / 255 - 0.5) / 0.5
    torch.testing.assert_close(out["pixel_values"][0, -1], torch.full((224, 224), expected_siglip))
    if n_ch == 6:
        expected_dino = (128 / 255 - IMAGENET_MEAN[0]) / IMAGENET_STD[0]
        torch.testing.assert_close(out["pixel_values"][0, 0], torch.full((224, 224), expected_dino))


@pytest.mark.parametrize("vocab_size", [1024, 32000])
def test_tokenizer_reads_the_tabletop_task_words_whole(vocab_size: int) -> None:
    from prismatic_tr.envs.spec import COLORS, INSTRUCTION_TEMPLATES, SHAPES
    from prismatic_tr.models import tokenizer as tk

    assert tk._TASK_COLORS == list(COLORS) and tk._TASK_SHAPES == list(SHAPES)
    assert tk._TASK_TEMPLATES == list(INSTRUCTION_TEMPLATES.values())
    tok, default = build_tokenizer(vocab_size, task_words=True), build_tokenizer(vocab_size)
    for word in [*COLORS, *SHAPES]:
        assert tok.tokenize(f" {word}") == [f"\u0120{word}"], word
    assert len(default.tokenize(" purple circle")) > 2  # off by default: other presets' ids are unchanged


@pytest.mark.parametrize("vocab_size", [1024, 32000])
def test_tokenizer_layout(vocab_size: int) -> None:
    tok, again = build_tokenizer(vocab_size), build_tokenizer(vocab_size)
    assert tok.get_vocab() == again.get_vocab()  # deterministic
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2, vocab_size)
    assert tok.vocab_size == vocab_size and len(tok) == vocab_size + 1
    ids = tok(_corpus()[:50] + ["unseen words like zebra quantum 42!"])["input_ids"]
    assert max(max(row) for row in ids) < vocab_size - 256
    prompt = build_prompt("Pick up the red block")
    assert prompt == "In: What action should the robot take to pick up the red block?\nOut:"
    assert (
        tok.decode(tok(prompt, return_tensors="pt")["input_ids"][0], skip_special_tokens=True).strip()
        == prompt
    )


def test_processor_save_load(tmp_path) -> None:
    proc = build_processor(make_config("tiny"))
    proc.save_pretrained(tmp_path)
    loaded = PrismaticProcessor.from_pretrained(tmp_path)
    assert loaded.tokenizer.get_vocab() == proc.tokenizer.get_vocab()
    img = np.random.default_rng(0).integers(0, 255, (30, 40, 3), dtype=np.uint8)
    a, b = proc(build_prompt("lift the cup"), img), loaded(build_prompt("lift the cup"), img)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_dtypes_and_attention(dtype: torch.dtype, attn: str) -> None:
    config = make_config("tiny", "siglip-vit-so400m")
    config.attn_implementation_llm = attn
    torch.manual_seed(0)
    vla = ReferenceOpenVLA(config).to(dtype).eval()
    inp = make_inputs(vla, batch=2)
    with torch.no_grad():
        out = vla(**inp)
    assert out.projector_features.dtype == dtype and torch.isfinite(out.logits).all()
    assert vla.predict_action(**inp).shape == (2, 7)


# --- errors ---


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"preset": "huge"}, "huge.*cpu-bench"),
        ({"vision_backbone_id": "clip-vit-l"}, "clip-vit-l.*siglip-vit-so400m"),
    ],
)
def test_bad_build_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_vla(**kwargs)


def test_bad_unnorm_key_and_inputs(fused: ReferenceOpenVLA) -> None:
    inp = make_inputs(fused, batch=1)
    with pytest.raises(ValueError, match="libero.*bridge_orig"):
        fused.predict_action(**inp, unnorm_key="libero")
    fused.norm_stats["second"] = fused.norm_stats["bridge_orig"]
    try:
        with pytest.raises(ValueError, match="bridge_orig.*second"):
            fused.get_action_dim(None)
    finally:
        del fused.norm_stats["second"]
    with pytest.raises(ValueError, match="expected"):
        fused.vision_backbone(torch.randn(1, 3, 224, 224))
    with pytest.raises(ValueError, match="max_new_tokens"):
        fused.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=0)
    with pytest.raises(ValueError, match="images"):
        build_processor(fused.config)(["a", "b"], [np.zeros((8, 8, 3), np.uint8)])
    with pytest.raises(ValueError, match="float64"):
        build_processor(fused.config)("a", np.zeros((8, 8, 3)))


def test_load_vla_bad_paths(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        load_vla(str(tmp_path / "does-not-exist"))
    with pytest.raises(ValueError, match="no config.json"):
        load_vla(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        load_vla(tmp_path / "file.txt")


# --- adapter over an OpenVLA-style model ---


def test_adapter_matches_wrapped_model(fused: ReferenceOpenVLA) -> None:
    adapter = OpenVLAAdapter(fused, empty_token_id=None)
    assert adapter.vision_backbone is fused.vision_backbone and adapter.norm_stats is fused.norm_stats
    inp = make_inputs(fused, batch=2)
    ours = adapter.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2, return_logits=True)
    ref = fused.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2, return_logits=True)
    assert torch.equal(ours.sequences, ref.sequences) and torch.equal(ours.logits, ref.logits)
    assert np.array_equal(adapter.predict_action(**inp), fused.predict_action(**inp))


def test_adapter_appends_empty_token_after_last_real_token(fused: ReferenceOpenVLA) -> None:
    adapter = OpenVLAAdapter(fused, empty_token_id=7)
    a, b = make_inputs(fused, 1, 9, seed=4), make_inputs(fused, 1, 6, seed=5)
    ids_b = torch.cat([b["input_ids"], torch.full((1, 3), fused.pad_token_id)], 1)
    mask_b = torch.cat([b["attention_mask"], torch.zeros(1, 3, dtype=torch.long)], 1)
    batch = adapter.predict_action(
        input_ids=torch.cat([a["input_ids"], ids_b]),
        attention_mask=torch.cat([a["attention_mask"], mask_b]),
        pixel_values=torch.cat([a["pixel_values"], b["pixel_values"]]),
    )
    for row, single in enumerate((a, b)):
        ids = torch.cat([single["input_ids"], torch.tensor([[7]])], 1)
        assert np.allclose(
            batch[row], fused.predict_action(input_ids=ids, pixel_values=single["pixel_values"])
        )


def test_adapter_rejects_other_models() -> None:
    with pytest.raises(ValueError, match="vision_backbone"):
        OpenVLAAdapter(torch.nn.Linear(2, 2))


# --- sizes ---


def test_openvla_7b_parameter_count_on_meta() -> None:
    with torch.device("meta"):
        vla = build_vla("openvla-7b")
    p = PRESETS["openvla-7b"]
    h, i, v = p.hidden_size, p.intermediate_size, 32064
    llama = 2 * v * h + p.num_hidden_layers * (4 * h * h + 3 * h * i + 2 * h) + h
    assert sum(x.numel() for x in vla.language_model.parameters()) == llama
    total = sum(x.numel() for x in vla.parameters())
    assert 7.4e9 < total < 7.7e9 and vla.vision_backbone.embed_dim == 2176


def test_openvla_oft_7b_is_openvla_7b_plus_oft_parts_on_meta() -> None:
    from prismatic_tr.models import NativeOpenVLAOFT

    with torch.device("meta"):
        base, oft = build_vla("openvla-7b"), build_vla("openvla-oft-7b")
    assert isinstance(oft, NativeOpenVLAOFT)
    s = oft.config.oft_settings
    assert (s.num_images_in_input, s.proprio_dim, s.num_actions_chunk, s.action_dim) == (2, 8, 8, 7)
    shared = sum(x.numel() for x in base.parameters())
    extra = sum(x.numel() for x in oft.parameters()) - shared
    # the proprio projector and the L1 head on Llama-2-7B's hidden size: tens to hundreds of millions, not billions
    assert 1e7 < extra < 5e8
    assert sum(x.numel() for x in oft.language_model.parameters()) == sum(
        x.numel() for x in base.language_model.parameters())


@pytest.mark.slow
def test_cpu_bench_vision_features_bf16(one_thread: int) -> None:
    from prismatic_tr.models.init_utils import materialize_parameters_, parameters_on_meta
    from prismatic_tr.models.vision import NativeVisionBackbone

    spec = VISION_BACKBONES["dinosiglip-vit-so-224px"]
    with parameters_on_meta():
        vb = NativeVisionBackbone(list(spec.timm_model_ids), list(spec.image_sizes), list(spec.act_layers))
    materialize_parameters_(vb, "cpu", torch.bfloat16, seed=0)
    torch.set_num_threads(one_thread)  # real-size model: all threads for this forward
    try:
        with torch.no_grad():
            feats = vb(torch.randn(1, 6, 224, 224))
    finally:
        torch.set_num_threads(1)
    assert feats.shape == (1, 256, 2176) and feats.dtype == torch.bfloat16 and torch.isfinite(feats).all()
    assert vb.embed_dim == 1024 + 1152
    assert len(vb.featurizer.blocks) == 24 and len(vb.fused_featurizer.blocks) == 27
