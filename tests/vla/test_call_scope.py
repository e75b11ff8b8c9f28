"""No state survives a call (issue 27, item 1): what a site learns in one top-level call of the VLA (kept tokens,
the visual count) never reaches the next one.

At every site, on the native model (both stacks) and OpenVLA's remote code (pins): a standalone
``embed_images`` / backbone call, or a call that raises between the backbone and the language model, followed
by a text-only forward and a text-only ``generate``, gives exactly what the unreduced model gives. Also: the
scope's wrappers leave with the last site, nested calls share one record, towers run by hand stay bounded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from helpers.reference_clients import import_openvla_hf
from helpers.reference_models import build_reference_vla
from helpers.tiny_vla import make_inputs, tiny

from prismatic_tr.models import build_vla
from prismatic_tr.vla import (
    apply_token_reduction_to_vla,
    get_token_reduction,
    reduction_call,
    remove_token_reduction,
)
from prismatic_tr.vla.scope import SCOPE_ATTR, scope_of
from prismatic_tr.vla.sites.vision import MAX_IMAGES

SITES = [
    dict(site="projector", method="diverse", reduction_ratio=0.25),
    dict(site="vision", method="diverse", reduction_ratio=0.25, depth_fraction=0.5),
    dict(site="llm", reduction_ratio=0.25, depth_fraction=0.5),
    # a merge inside the towers: its group sizes ride in the call's record for the later blocks and the language model
    dict(site="vision", method="diverse_merge_keys", reduction_ratio=0.25, depth_fraction=0.5),
]
IDS = [s["site"] + ("-" + s["method"] if s.get("method", "diverse") != "diverse" else "") for s in SITES]


class Boom(RuntimeError):
    pass


def text_only(vla: torch.nn.Module, ids: torch.Tensor, native: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of a text-only forward and the scores of a text-only greedy generate (3 tokens)."""
    with torch.no_grad():
        logits = vla(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        if native:
            scores = vla.generate(ids, None, max_new_tokens=3, return_logits=True).logits
        else:
            out = vla.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                               output_scores=True, return_dict_in_generate=True)
            scores = torch.stack(out.scores, dim=1)
    return logits, scores


def interrupted_calls(vla: torch.nn.Module, px: torch.Tensor, ids: torch.Tensor) -> list[Callable[[], Any]]:
    """Calls that stop between the backbone and the language model."""

    def raise_in_lm(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        raise Boom("the language model fails")

    def full_call_that_raises() -> None:
        hook = vla.language_model.register_forward_pre_hook(raise_in_lm, with_kwargs=True)
        try:
            with pytest.raises(Boom):
                vla(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=px)
        finally:
            hook.remove()

    def backbone_and_projector() -> None:
        vla.projector(vla.vision_backbone(px))

    calls = [backbone_and_projector, full_call_that_raises]
    if hasattr(vla, "embed_images"):
        calls.append(lambda: vla.embed_images(px))
    return calls


def check_no_state_crosses(vla: torch.nn.Module, setting: dict, native: bool) -> None:
    inp = make_inputs(vla, batch=1, length=10) if native else remote_inputs()
    ids, px = inp["input_ids"], inp["pixel_values"]
    want = text_only(vla, ids, native)
    before = set(vars(vla))
    apply_token_reduction_to_vla(vla, **setting)
    try:
        for interrupt in interrupted_calls(vla, px, ids):
            with torch.no_grad():
                interrupt()
            got = text_only(vla, ids, native)
            assert torch.equal(got[0], want[0]), f"text-only forward after {interrupt.__name__}"
            assert torch.equal(got[1], want[1]), f"text-only generate after {interrupt.__name__}"
            assert scope_of(vla).record is None and scope_of(vla).depth == 0
    finally:
        remove_token_reduction(vla)
    assert set(vars(vla)) == before and SCOPE_ATTR not in vars(vla)  # wrappers and scope gone with the site


@pytest.mark.parametrize("setting", SITES, ids=IDS)
def test_native_no_state_crosses_calls(setting: dict) -> None:
    check_no_state_crosses(tiny(), setting, native=True)


def remote_inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 29000, (1, 10), generator=g)
    ids[:, 0] = 1
    return {"input_ids": ids, "pixel_values": torch.randn(1, 6, 224, 224, generator=g)}


@pytest.mark.parametrize("setting", SITES, ids=IDS)
def test_remote_code_no_state_crosses_calls(setting: dict) -> None:
    modeling = import_openvla_hf("modeling_prismatic")
    configuration = import_openvla_hf("configuration_prismatic")
    check_no_state_crosses(build_reference_vla(modeling, configuration), setting, native=False)


@pytest.mark.parametrize("setting", SITES[:2], ids=IDS[:2])
def test_reduction_still_reaches_the_language_model_within_a_call(setting: dict) -> None:
    """The scope does not lose the hand-off: a call with an image is reduced (kept recorded, positions applied)
    and nested calls (generate -> forward) share the outermost record."""
    vla = tiny()
    inp = make_inputs(vla, batch=1)
    with torch.no_grad():
        plain = vla(**inp).logits
    apply_token_reduction_to_vla(vla, **setting)
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            reduced = vla(**inp).logits
            assert scope_of(vla).depth == 1 and call.positions_taken
        assert call.kept is not None and call.kept.shape == (1, 64)
        assert reduced.shape[1] < plain.shape[1]
    finally:
        remove_token_reduction(vla)


def test_towers_run_by_hand_stay_bounded() -> None:
    vla = tiny()
    px = make_inputs(vla, batch=1)["pixel_values"]
    apply_token_reduction_to_vla(vla, **SITES[1])
    try:
        with torch.no_grad():
            for _ in range(MAX_IMAGES + 5):
                vla.vision_backbone.featurizer(px[:, :3])
            assert len(get_token_reduction(vla).records.current().images) <= MAX_IMAGES
            vla.vision_backbone(px)  # a whole backbone forward starts afresh
        assert get_token_reduction(vla).records.current() is None  # and its record leaves with it
    finally:
        remove_token_reduction(vla)


def holds_tensor(value: Any, depth: int = 3) -> bool:
    """A tensor, or a tuple / list / dict / dataclass holding one (modules and their parameters not counted)."""
    if isinstance(value, torch.Tensor):
        return True
    if depth == 0 or isinstance(value, torch.nn.Module):
        return False
    if isinstance(value, (tuple, list)):
        return any(holds_tensor(v, depth - 1) for v in value)
    if isinstance(value, dict):
        return any(holds_tensor(v, depth - 1) for v in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(holds_tensor(getattr(value, f.name), depth - 1) for f in dataclasses.fields(value))
    return False


@pytest.mark.parametrize("setting", SITES, ids=IDS)
def test_the_handles_hold_no_value_of_a_call(setting: dict[str, Any]) -> None:
    """Per-call state in one place (issue 49): in a call every hook keeps what it learns in the call's record; after
    it no part of the reduction (the site, the towers' selection, the position keeping, the pruning) holds a tensor
    or a record of its own, and a text-only generate that follows runs as unreduced."""
    vla = tiny()
    inp = make_inputs(vla, batch=1)
    ids = inp["input_ids"]
    with torch.no_grad():
        plain = vla.generate(ids, None, max_new_tokens=3, return_logits=True).logits
    apply_token_reduction_to_vla(vla, **setting)
    handle = get_token_reduction(vla, site=setting["site"])
    try:
        with torch.no_grad():
            with reduction_call(vla) as call:
                vla.generate(ids, inp["pixel_values"], max_new_tokens=3)
            parts = [p for p in (handle, getattr(handle, "selection", None), getattr(handle, "positions", None),
                                 getattr(handle, "pruning", None)) if p is not None]
            assert len(parts) >= 2
            for part in parts:
                held = sorted(k for k, v in vars(part).items() if holds_tensor(v))
                assert held == [], f"{type(part).__name__} holds {held} after the call"
                assert getattr(getattr(part, "records", None), "own", None) is None, type(part).__name__
            assert (call.kept if setting["site"] != "llm" else call.llm_kept) is not None
            assert (call.positions if setting["site"] != "llm" else call.pruning) is not None  # it was in the record
            after = vla.generate(ids, None, max_new_tokens=3, return_logits=True).logits
        assert torch.equal(after, plain)
    finally:
        remove_token_reduction(vla)


def test_reduction_call_without_a_reduction_records_nothing() -> None:
    vla = tiny()
    inp = make_inputs(vla, batch=1)
    with torch.no_grad(), reduction_call(vla) as call:
        vla(**inp)
    assert call.kept is None and call.llm_kept is None and scope_of(vla) is None


@pytest.mark.parametrize("attach_first", [True, False])
def test_peft_wrapped_calls_are_scoped_on_the_inner_model(attach_first: bool) -> None:
    """Attached before or after PEFT wraps the model: the scope sits on the inner VLA, whose own methods every
    wrapper call ends in, so generate through the wrapper hands on the kept tokens and nothing crosses."""
    peft = pytest.importorskip("peft")
    vla = build_vla("tiny", seed=0)  # not the shared tiny(): PEFT changes the model it wraps
    inp = make_inputs(vla, batch=1)
    if attach_first:
        apply_token_reduction_to_vla(vla, **SITES[1])
    wrapped = peft.get_peft_model(vla, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    if not attach_first:
        apply_token_reduction_to_vla(wrapped, **SITES[1])
    try:
        assert scope_of(wrapped) is scope_of(vla) is not None and SCOPE_ATTR in vars(vla)
        with torch.no_grad(), reduction_call(wrapped) as call:
            wrapped.generate(inp["input_ids"], inp["pixel_values"], max_new_tokens=2)
        assert call.kept is not None and call.kept.shape == (1, 64) and call.positions_taken
    finally:
        remove_token_reduction(wrapped)
    assert scope_of(vla) is None and SCOPE_ATTR not in vars(vla)


@pytest.mark.parametrize("spec", ["diverse:0.25", "diverse_merge:0.25", "vision:diverse:0.25@0.25",
                                  "vision:diverse_merge:0.25@0.25", "vision:diverse_merge_keys:0.25@0.25",
                                  "llm:attention:0.5@0.25"])
def test_the_oft_training_pass_is_a_call_of_its_own(spec: str) -> None:
    """OpenVLA-OFT's training forward (``predict_chunk``, what fine-tuning and distillation run) is a top-level call:
    with gradients on, outside any call opened by hand, it gives the chunk of ``predict_action``'s own pass (kept
    tokens at their original positions, a merge's sizes weighed), not the pass without the call's hand-offs."""
    from prismatic_tr.models.oft import predict_chunk
    from prismatic_tr.vla import apply_token_reduction_spec

    vla = build_vla("tiny-oft")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 1000, (2, 9), generator=g)
    ids[:, 0] = 1
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "proprio": torch.rand(2, 8, generator=g),
             "pixel_values": torch.randn(2, 12, 224, 224, generator=g)}
    apply_token_reduction_spec(vla, spec)
    try:
        with torch.no_grad(), reduction_call(vla):
            want = vla.chunk_on_device(batch["input_ids"], batch["pixel_values"], batch["attention_mask"],
                                       batch["proprio"])[0]
        got = predict_chunk(vla, batch)
        assert got.requires_grad
        torch.testing.assert_close(got.detach().flatten(1), want.flatten(1), rtol=1e-5, atol=1e-5)
        assert scope_of(vla).record is None  # the call ended with the pass
    finally:
        remove_token_reduction(vla)
