"""Kept tokens keep their place: the language model sees every token of a reduced sequence at the position it
has without reduction, at every site, in training forwards, generation (padded, cached) and OpenVLA's own
remote code; ``positions="compact"`` renumbers them as v0.2 did.

Each check runs the language model by hand on ``[BOS, projector(kept patches), text]`` at the expected ids
(:mod:`helpers.positions`) with no reduction attached. The attention of the random-weight models is sharpened
so that positions matter, and every test asserts that the other numbering gives clearly different logits: a
test that passed with either numbering would prove nothing.
"""

from __future__ import annotations

import pytest
import torch
from helpers.positions import expected_ids, handbuilt_logits, sharpen_attention
from helpers.reference_clients import import_openvla_hf
from helpers.reference_models import UNNORM_KEY, build_reference_vla

from prismatic_tr.bench.measure.ops import find_host_syncs
from prismatic_tr.llm import original_positions
from prismatic_tr.models import NativeOpenVLA, build_vla
from prismatic_tr.vla import (
    apply_token_reduction_to_vla,
    get_token_reduction,
    reduction_call,
    remove_token_reduction,
)

SENSITIVE = 1e-2  # the two numberings must differ by more than this (max |logit diff|)
TIGHT = dict(rtol=1e-5, atol=1e-5)

# site, method, keep, merge, depth
SETTINGS = [
    ("projector", "random", 0.5, 2, None),
    ("projector", "topk_magnitude", 0.25, 2, None),
    ("projector", "attention_score", 0.1, 2, None),
    ("projector", "spatial_pool", 0.25, 2, None),
    ("vision", "norm", 0.25, 2, 0.5),
    ("vision", "attention", 0.5, 2, 0.25),
]


def settings_id(s: tuple) -> str:
    return f"{s[0]}-{s[1]}-{s[2]}"


def sharp_tiny(backbone: str = "dinosiglip-vit-so-224px", seed: int = 0) -> NativeOpenVLA:
    vla = build_vla("tiny", backbone, seed=seed).eval()
    sharpen_attention(vla.language_model)
    return vla


def make_inputs(vla: NativeOpenVLA, batch: int = 2, length: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vla.vocab_size - 256, (batch, length), generator=g)
    ids[:, 0] = 1
    channels = 6 if vla.vision_backbone.use_fused_vision_backbone else 3
    return {"input_ids": ids, "pixel_values": torch.randn(batch, channels, 224, 224, generator=g)}


def attach(vla: torch.nn.Module, setting: tuple, positions: str = "original") -> None:
    site, method, keep, merge, depth = setting
    apply_token_reduction_to_vla(vla, method, keep, merge, site=site, depth_fraction=depth, positions=positions)


def check_numbering(logits: torch.Tensor, lm: torch.nn.Module, embed: torch.nn.Module, input_ids: torch.Tensor,
                    projected: torch.Tensor, kept: torch.Tensor, num_original: int, positions: str,
                    key_mask: torch.Tensor | None = None) -> None:
    """``logits`` equal the hand-built run at ``positions``' ids and differ clearly from the other numbering's."""
    args = (kept, num_original, projected.shape[1], input_ids.shape[1] - 1)
    want = handbuilt_logits(lm, embed, input_ids, projected, expected_ids(*args, compact=positions == "compact"),
                            key_mask)
    other = handbuilt_logits(lm, embed, input_ids, projected, expected_ids(*args, compact=positions != "compact"),
                             key_mask)
    text_mask = torch.ones_like(input_ids) if key_mask is None else key_mask
    real = torch.cat([torch.ones(kept.shape[0], 1 + kept.shape[1], dtype=torch.bool), text_mask[:, 1:].bool()], 1)
    torch.testing.assert_close(logits[real].float(), want[real].float(), **TIGHT)
    assert (logits[real].float() - other[real].float()).abs().max() > SENSITIVE, "the test is not sensitive"


# --- the rule itself ---


def test_original_positions_rule() -> None:
    compact = torch.tensor([[0, 1, 2, 3, 4, 5, 6]])  # BOS, 3 visual, 3 text
    kept = torch.tensor([[0, 4, 9], [2, 3, 7]])
    assert original_positions(compact, kept, 10).tolist() == [[0, 1, 5, 10, 11, 12, 13], [0, 3, 4, 8, 11, 12, 13]]
    decode = torch.tensor([[7], [9]])  # decode steps continue from the compact count
    assert original_positions(decode, kept, 10).tolist() == [[14], [16]]
    pooled = torch.tensor([[8.5, 10.5]])  # merged tokens: fractional positions
    assert original_positions(torch.tensor([[0, 1, 2, 3]]), pooled, 16).tolist() == [[0, 9.5, 11.5, 17.0]]


# --- native model: training forward ---


@pytest.mark.parametrize("positions", ["original", "compact"])
@pytest.mark.parametrize("setting", SETTINGS, ids=settings_id)
def test_forward_logits_equal_the_handbuilt_run(setting: tuple, positions: str) -> None:
    vla = sharp_tiny()
    inp = make_inputs(vla)
    attach(vla, setting, positions)
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            out = vla(**inp)
        kept = call.kept
    finally:
        remove_token_reduction(vla)
    assert kept.shape == (2, out.projector_features.shape[1])
    check_numbering(out.logits, vla.language_model, vla.get_input_embeddings(), inp["input_ids"],
                    out.projector_features, kept, 256, positions)


def test_right_padded_training_batch_keeps_positions_per_row() -> None:
    vla = sharp_tiny()
    inp = make_inputs(vla, length=12)
    mask = torch.ones_like(inp["input_ids"])
    mask[1, -4:] = 0  # row 1 right-padded, as OpenVLA's collator pads
    attach(vla, SETTINGS[1])
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            out = vla(**inp, attention_mask=mask, labels=inp["input_ids"])
        kept = call.kept
    finally:
        remove_token_reduction(vla)
    assert torch.isfinite(out.loss)
    check_numbering(out.logits, vla.language_model, vla.get_input_embeddings(), inp["input_ids"],
                    out.projector_features, kept, 256, "original", key_mask=mask)


# --- native model: generation with the KV cache ---


def cache_free_step_logits(vla: NativeOpenVLA, prompt: torch.Tensor, projected: torch.Tensor, kept: torch.Tensor,
                           new: torch.Tensor) -> torch.Tensor:
    """(1, steps, V): for each generated token, the hand-built logits of the whole sequence before it."""
    out = []
    for step in range(new.shape[1]):
        ids = torch.cat([prompt, new[:, :step]], dim=1)
        pos = expected_ids(kept, 256, kept.shape[1], ids.shape[1] - 1)
        out.append(handbuilt_logits(vla.language_model, vla.get_input_embeddings(), ids, projected, pos)[:, -1])
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("setting", [SETTINGS[1], SETTINGS[3], SETTINGS[4]], ids=settings_id)
def test_generation_equals_cache_free_decoding_at_original_positions(setting: tuple) -> None:
    """A padded batch of two prompts of different lengths: each row's cached greedy decode equals decoding it alone
    without a cache at the original positions."""
    vla = sharp_tiny()
    inp = make_inputs(vla, length=12)
    mask = torch.ones_like(inp["input_ids"])
    mask[0, -3:] = 0
    seen: dict[str, torch.Tensor] = {}
    hook = vla.projector.register_forward_hook(lambda m, a, o: seen.__setitem__("projected", o))
    attach(vla, setting)
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            gen = vla.generate(inp["input_ids"], inp["pixel_values"], attention_mask=mask, max_new_tokens=4,
                               return_logits=True)
        kept = call.kept
    finally:
        remove_token_reduction(vla)
        hook.remove()
    for row, length in ((0, 9), (1, 12)):
        prompt = inp["input_ids"][row : row + 1, :length]
        new = gen.sequences[row : row + 1, -4:]
        ref = cache_free_step_logits(vla, prompt, seen["projected"][row : row + 1], kept[row : row + 1], new)
        torch.testing.assert_close(gen.logits[row : row + 1], ref.float(), rtol=1e-4, atol=1e-4)


def test_llm_site_on_top_of_a_pre_llm_cut_keeps_original_positions() -> None:
    """vision site + llm site: the cached decode equals a no-cache recomputation of the pruned sequence, and the
    logits are not those of the compact numbering."""
    vla = sharp_tiny()
    inp = make_inputs(vla, length=10)
    apply_token_reduction_to_vla(vla, "norm", 0.5, site="vision", depth_fraction=0.5)
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.5, depth_fraction=0.5)
    llm = get_token_reduction(vla, site="llm")
    try:
        with torch.no_grad():
            with reduction_call(vla) as call:
                gen = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3, return_logits=True)
            llm.pruning.force_kept, llm.pruning.prune_uncached = call.llm_kept, True
            again = vla(input_ids=gen.sequences[:, :-1], pixel_values=inp["pixel_values"]).logits
        torch.testing.assert_close(again[:, -3:].float(), gen.logits, rtol=1e-5, atol=1e-5)
        remove_token_reduction(vla, site="vision")
        apply_token_reduction_to_vla(vla, "norm", 0.5, site="vision", depth_fraction=0.5, positions="compact")
        with torch.no_grad():
            compact = vla(input_ids=gen.sequences[:, :-1], pixel_values=inp["pixel_values"]).logits
        assert (compact[:, -3:].float() - gen.logits).abs().max() > SENSITIVE
    finally:
        remove_token_reduction(vla)


@pytest.mark.parametrize("setting", [SETTINGS[0], SETTINGS[3], SETTINGS[4]], ids=settings_id)
def test_position_keeping_adds_no_host_sync_and_undoes_exactly(setting: tuple) -> None:
    vla = sharp_tiny()
    inp = make_inputs(vla)
    with torch.no_grad():
        before = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3, return_logits=True).logits
    rotary = [m for m in vla.language_model.modules() if "RotaryEmbedding" in type(m).__name__]
    attach(vla, setting)
    try:
        assert all(len(m._forward_pre_hooks) == 1 for m in rotary)
        assert find_host_syncs(lambda: vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3)) == {}
    finally:
        remove_token_reduction(vla)
    assert all(len(m._forward_pre_hooks) == 0 for m in rotary) and not vla.language_model.model._forward_pre_hooks
    with torch.no_grad():
        after = vla.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=3, return_logits=True).logits
    assert torch.equal(before, after)


def test_text_only_call_after_an_image_runs_at_ordinary_positions() -> None:
    vla = sharp_tiny()
    inp = make_inputs(vla, batch=1)
    with torch.no_grad():
        text_only = vla(input_ids=inp["input_ids"]).logits
        attach(vla, SETTINGS[1])
        try:
            vla(**inp)  # an image call records its kept tokens
            again = vla(input_ids=inp["input_ids"]).logits
        finally:
            remove_token_reduction(vla)
    assert torch.equal(text_only, again)


@pytest.mark.slow
def test_compiled_language_model_keeps_positions_fullgraph() -> None:
    vla = sharp_tiny()
    inp = make_inputs(vla, batch=1)
    attach(vla, SETTINGS[1])
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            projected = vla.embed_images(inp["pixel_values"])  # records the kept tokens in this call
            embeds, _, _ = vla.build_multimodal_inputs(inp["input_ids"], None, projected)
            kept = call.kept

            def run(e: torch.Tensor) -> torch.Tensor:
                call.hand_on(kept, 256)  # each run is the call's fresh language-model call
                return vla.language_model.model(inputs_embeds=e, use_cache=False).last_hidden_state

            eager = run(embeds)
            compiled = torch.compile(run, fullgraph=True)(embeds)
    finally:
        remove_token_reduction(vla)
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-4)


def test_peft_wrapped_model_keeps_positions() -> None:
    peft = pytest.importorskip("peft")
    vla = sharp_tiny()
    inp = make_inputs(vla)
    wrapped = peft.get_peft_model(vla, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=True))
    attach(wrapped, SETTINGS[0])
    try:
        with torch.no_grad(), reduction_call(wrapped) as call:
            out = wrapped(**inp)
        kept = call.kept
    finally:
        remove_token_reduction(wrapped)
    check_numbering(out.logits, vla.language_model, vla.get_input_embeddings(), inp["input_ids"],
                    out.projector_features, kept, 256, "original")


# --- OpenVLA's own remote code (pins) ---


@pytest.fixture(scope="module")
def remote() -> torch.nn.Module:
    modeling = import_openvla_hf("modeling_prismatic")
    configuration = import_openvla_hf("configuration_prismatic")
    vla = build_reference_vla(modeling, configuration)
    sharpen_attention(vla.language_model)
    return vla


def remote_inputs(batch: int = 1, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 29000, (batch, 10), generator=g)
    ids[:, 0] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "pixel_values": torch.randn(batch, 6, 224, 224, generator=g)}


@pytest.mark.parametrize("setting", [SETTINGS[0], SETTINGS[3], SETTINGS[4]], ids=settings_id)
def test_remote_code_forward_keeps_original_positions(remote: torch.nn.Module, setting: tuple) -> None:
    inp = remote_inputs(batch=2)
    attach(remote, setting)
    try:
        with torch.no_grad(), reduction_call(remote) as call:
            out = remote(**inp)
        kept = call.kept
    finally:
        remove_token_reduction(remote)
    check_numbering(out.logits, remote.language_model, remote.get_input_embeddings(), inp["input_ids"],
                    out.projector_features, kept, 256, "original")


def test_remote_code_generate_and_predict_action_keep_original_positions(remote: torch.nn.Module) -> None:
    """transformers' own generation loop (decode positions from the cache length) through OpenVLA's remote code:
    every step's scores equal cache-free decoding at the original positions, and predict_action acts on them."""
    inp = remote_inputs()
    seen: dict[str, torch.Tensor] = {}
    hook = remote.projector.register_forward_hook(lambda m, a, o: seen.__setitem__("projected", o))
    attach(remote, SETTINGS[1])
    try:
        with torch.no_grad(), reduction_call(remote) as call:
            gen = remote.generate(inp["input_ids"], pixel_values=inp["pixel_values"], max_new_tokens=4,
                                  do_sample=False, output_scores=True, return_dict_in_generate=True)
            action = remote.predict_action(**inp, unnorm_key=UNNORM_KEY, do_sample=False)
        kept = call.kept
    finally:
        remove_token_reduction(remote)
        hook.remove()
    new = gen.sequences[:, inp["input_ids"].shape[1] :]
    scores = torch.stack(gen.scores, dim=1)
    ref = []
    for step in range(new.shape[1]):
        ids = torch.cat([inp["input_ids"], new[:, :step]], dim=1)
        pos = expected_ids(kept, 256, kept.shape[1], ids.shape[1] - 1)
        ref.append(handbuilt_logits(remote.language_model, remote.get_input_embeddings(), ids, seen["projected"],
                                    pos)[:, -1])
    torch.testing.assert_close(scores.float(), torch.stack(ref, dim=1).float(), rtol=1e-4, atol=1e-4)
    assert action.shape == (7,)
