"""Proportional attention (:mod:`prismatic_tr.llm.sizes`): a visual token that stands for n patches is weighed as
n copies of it would be, in a prefill, a decode step and under a mask the caller hands the layers; a merging
method at the projector site hands its sizes on and the language model uses them; nothing stays after removal.

The exact check: in a one-layer Llama, ``[BOS, a, a, a, b, text]`` with the three copies of ``a`` at one position
gives the text tokens the same hidden states as ``[BOS, a, b, text]`` with ``a`` of size 3 (the copies' keys and
values are the same, so softmax over them equals one key with ``+ log 3``). Each test also asserts that without the
sizes the two differ clearly: a test that passed either way would prove nothing.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from helpers.tiny_vla import make_inputs
from transformers import LlamaConfig, LlamaForCausalLM

from prismatic_tr.calls import CallRecord
from prismatic_tr.llm.sizes import ProportionalAttention, causal_bias, size_columns
from prismatic_tr.models import NativeOpenVLAOFT, build_vla
from prismatic_tr.models.generation import CACHE_NAME, every_layer_gets, ready_cache
from prismatic_tr.vla import (
    Setting,
    apply_token_reduction_spec,
    get_token_reduction,
    reduction_call,
    remove_token_reduction,
)

TEXT = 4
SENSITIVE = 1e-3


def small_llama(seed: int = 0, layers: int = 1) -> LlamaForCausalLM:
    """A Llama of ``layers`` layers (several: every layer after the first reuses the call's weighted mask)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    lm = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper attention, so that weights matter
        for layer in lm.model.layers:
            layer.self_attn.q_proj.weight.mul_(4)
            layer.self_attn.k_proj.weight.mul_(4)
    return lm


def sequences(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(full embeds, full position ids, merged embeds, merged position ids), batch 2: full ``[BOS, a, a, a, b,
    text]`` with the copies at one position, merged ``[BOS, a, b, text]``."""
    g = torch.Generator().manual_seed(seed)
    bos, a, b, text = (torch.randn(2, n, 32, generator=g) for n in (1, 1, 1, TEXT))
    full = torch.cat([bos, a, a, a, b, text], dim=1)
    merged = torch.cat([bos, a, b, text], dim=1)
    ids_merged = torch.arange(merged.shape[1]).expand(2, -1)
    ids_full = torch.cat([ids_merged[:, :2], ids_merged[:, 1:2], ids_merged[:, 1:2], ids_merged[:, 2:]], dim=1)
    return full, ids_full, merged, ids_merged


def causal_mask(length: int) -> torch.Tensor:
    """(2, 1, T, T) additive causal mask, handed to the layers as the OFT pass hands its masks."""
    return causal_bias(torch.zeros(2, 1, 1, length), 0, length)


def hidden(lm: LlamaForCausalLM, embeds: torch.Tensor, ids: torch.Tensor, layer_mask: torch.Tensor | None = None,
           **kwargs) -> torch.Tensor:
    """The last hidden states of ``lm.model``; ``layer_mask`` (B, 1, T, T) handed to every layer as the package's
    OFT pass does (:func:`every_layer_gets`), else transformers' own causal attention."""
    with torch.no_grad(), (every_layer_gets(lm, layer_mask) if layer_mask is not None else contextlib.nullcontext()):
        return lm.model(inputs_embeds=embeds, position_ids=ids, attention_mask=None, **kwargs).last_hidden_state


def reference(lm: LlamaForCausalLM, embeds: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The full sequence's last hidden states: an all-ones 2-D mask keeps transformers 5 from reading the repeated
    position ids as packed sequences."""
    with torch.no_grad():
        ones = torch.ones(embeds.shape[:2], dtype=torch.long)
        return lm.model(inputs_embeds=embeds, position_ids=ids, attention_mask=ones).last_hidden_state


SIZES = torch.tensor([[3.0, 1.0]]).expand(2, -1)


@pytest.mark.parametrize("mask", ["none", "4d"])
def test_a_token_of_size_n_is_weighed_as_n_copies_in_a_prefill(mask: str) -> None:
    """One layer: the copies all see the same keys there (after a layer, causal attention gives each copy another
    view, so the equivalence is a one-layer one)."""
    lm = small_llama()
    full, ids_full, merged, ids_merged = sequences()
    want = reference(lm, full, ids_full)[:, -TEXT:]
    given = causal_mask(merged.shape[1]) if mask == "4d" else None
    plain = hidden(lm, merged, ids_merged, given)[:, -TEXT:]
    assert (plain - want).abs().max() > SENSITIVE, "the copies must matter without sizes"
    record = CallRecord(sizes=SIZES)
    weighed = ProportionalAttention(lm, lambda: record)
    got = hidden(lm, merged, ids_merged, given)[:, -TEXT:]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    weighed.remove()
    torch.testing.assert_close(hidden(lm, merged, ids_merged, given)[:, -TEXT:], plain, rtol=0, atol=0)
    assert record.lm_call.extent == (0, merged.shape[1])


def test_a_decode_step_weighs_the_cached_merged_token() -> None:
    lm = small_llama(1)
    full, ids_full, merged, ids_merged = sequences(1)
    want = reference(lm, full, ids_full)[:, -1]
    record = CallRecord(sizes=SIZES)
    weighed = ProportionalAttention(lm, lambda: record)
    cache = ready_cache(lm, merged)
    with torch.no_grad():
        out = lm.model(inputs_embeds=merged[:, :-1], position_ids=ids_merged[:, :-1], use_cache=True,
                       **{CACHE_NAME: cache})
        got = lm.model(inputs_embeds=merged[:, -1:], position_ids=ids_merged[:, -1:], use_cache=True,
                       **{CACHE_NAME: getattr(out, CACHE_NAME)}).last_hidden_state[:, -1]
    assert record.lm_call.extent == (merged.shape[1] - 1, 1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    weighed.remove()


@pytest.mark.parametrize("mask", ["none", "4d"])
def test_every_layer_gets_the_weighted_mask_made_once_per_call(mask: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three layers: the hooks give the same hidden states as handing every layer the weighted mask by hand, in a
    prefill and in the decode step after it, and make the size columns once per language-model call."""
    from prismatic_tr.llm import sizes as sizes_module

    lm = small_llama(2, layers=3)
    _, _, merged, ids = sequences(2)
    length = merged.shape[1]
    given = causal_mask(length) if mask == "4d" else None
    by_hand = causal_bias(size_columns(SIZES, length, torch.float32), 0, length)
    want = hidden(lm, merged, ids, by_hand)
    made = []
    monkeypatch.setattr(sizes_module, "size_columns", lambda *a: made.append(a) or size_columns(*a))
    record = CallRecord(sizes=SIZES)
    weighed = ProportionalAttention(lm, lambda: record)
    try:
        torch.testing.assert_close(hidden(lm, merged, ids, given), want, rtol=0, atol=1e-6)
        assert len(made) == 1  # the first layer's; the other two reuse it
        cache = ready_cache(lm, merged)
        with torch.no_grad():
            out = lm.model(inputs_embeds=merged[:, :-1], position_ids=ids[:, :-1], use_cache=True,
                           **{CACHE_NAME: cache})
            step = lm.model(inputs_embeds=merged[:, -1:], position_ids=ids[:, -1:], use_cache=True,
                            **{CACHE_NAME: getattr(out, CACHE_NAME)}).last_hidden_state
        assert len(made) == 3  # one per call: the prefill of T - 1, the decode step
        torch.testing.assert_close(step[:, -1], want[:, -1], rtol=0, atol=1e-5)
    finally:
        weighed.remove()


def test_size_columns_refuse_too_few_keys_and_sit_after_bos() -> None:
    cols = size_columns(torch.tensor([[2.0, 1.0, 4.0]]), 6, torch.float32)
    torch.testing.assert_close(cols[0, 0, 0], torch.tensor([1, 2, 1, 4, 1, 1]).float().log())
    with pytest.raises(ValueError, match="need at least 4 keys"):
        size_columns(torch.ones(1, 3), 3, torch.float32)


def run(vla: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The logits of a forward (OpenVLA) or the slots' hidden states of ``predict_action`` (OpenVLA-OFT)."""
    with torch.no_grad():
        if isinstance(vla, NativeOpenVLAOFT):
            return vla.predict_action(**inputs, unnorm_key="bridge_orig", proprio=torch.zeros(2, 8))[1]
        return vla(**inputs).logits


MERGING = {"diverse_merge:0.25": "diverse:0.25", "vision:diverse_merge:0.25@0.25": "vision:diverse:0.25@0.25",
           "vision:diverse_merge_keys:0.25@0.25": "vision:diverse:0.25@0.25"}


@pytest.mark.parametrize("spec", list(MERGING))
@pytest.mark.parametrize("preset", ["tiny", "tiny-oft"])
def test_diverse_merge_hands_its_sizes_to_the_language_model(preset: str, spec: str) -> None:
    """At the projector site and at the vision site ``diverse_merge`` hands on sizes that sum to each image's
    patches; the language model weighs them (the output differs from the same merge unweighed); removal restores
    the model exactly; the selecting method hands none on."""
    vla = build_vla(preset)
    inputs = make_inputs(vla)
    if isinstance(vla, NativeOpenVLAOFT):
        inputs["pixel_values"] = torch.cat([inputs["pixel_values"]] * 2, dim=1)  # two images
    before = run(vla, inputs)
    handle = get_token_reduction(apply_token_reduction_spec(vla, spec))
    assert handle.proportional is not None
    with reduction_call(vla) as call:
        weighed = run(vla, inputs)
    images = 2 if isinstance(vla, NativeOpenVLAOFT) else 1
    assert call.sizes.shape == call.kept.shape and (call.sizes >= 1).all()
    per_image = call.sizes.reshape(2, images, -1).sum(dim=2)  # each image's tokens stand for its 256 patches
    assert torch.equal(per_image, torch.full((2, images), 256.0))
    assert call.num_original == images * 256
    handle.proportional.remove()  # the same merge, unweighed
    handle.proportional = None
    assert (weighed - run(vla, inputs)).abs().max() > SENSITIVE
    remove_token_reduction(vla)
    assert torch.equal(run(vla, inputs), before)
    plain = get_token_reduction(apply_token_reduction_spec(vla, MERGING[spec]))
    with reduction_call(vla) as call:
        run(vla, inputs)
    assert plain.proportional is None and call.sizes is None
    remove_token_reduction(vla)


@pytest.mark.parametrize("site", ["projector", "vision"])
def test_a_merging_method_is_not_combined_with_the_llm_site(site: str) -> None:
    with pytest.raises(ValueError, match="'diverse_merge' weighs its merged tokens"):
        Setting(method="diverse_merge", keep_ratio=0.25, site=site, also=(Setting.for_site("llm", keep_ratio=0.5),))


@pytest.mark.parametrize("spec", list(MERGING))
def test_openvlas_own_code_weighs_the_merged_tokens(spec: str) -> None:
    """OpenVLA's remote code (``../shared/reference``, OpenVLA's pins; skipped with the reason elsewhere) under
    ``diverse_merge``: its own ``predict_action`` (transformers' ``generate``) runs with the sizes in every step, the
    actions differ from the same merge unweighed, and removal gives back exactly the unreduced actions."""
    from helpers.reference_clients import import_openvla_hf
    from helpers.reference_models import UNNORM_KEY, build_reference_vla

    vla = build_reference_vla(import_openvla_hf("modeling_prismatic"), import_openvla_hf("configuration_prismatic"))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 29000, (1, 10), generator=g)
    ids[:, 0] = 1
    inputs = {"input_ids": ids, "pixel_values": torch.randn(1, 6, 224, 224, generator=g), "unnorm_key": UNNORM_KEY}

    def logits() -> torch.Tensor:
        with torch.no_grad():
            return vla(input_ids=ids, pixel_values=inputs["pixel_values"]).logits

    with torch.no_grad():
        before, before_logits = vla.predict_action(**inputs), logits()
    handle = get_token_reduction(apply_token_reduction_spec(vla, spec))
    with torch.no_grad(), reduction_call(vla) as call:
        vla.predict_action(**inputs)
    assert call.sizes is not None and call.sizes.sum() == call.num_original
    weighed = logits()
    handle.proportional.remove()
    handle.proportional = None
    assert (weighed - logits()).abs().max() > SENSITIVE
    remove_token_reduction(vla)
    with torch.no_grad():
        assert (vla.predict_action(**inputs) == before).all()
    assert torch.equal(logits(), before_logits)
