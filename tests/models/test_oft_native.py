"""The native OpenVLA-OFT model (``prismatic_tr.models.oft``): parity with OFT's own code, loading, the parallel pass.

Parity (OpenVLA's pins; skips elsewhere or without ``../shared/reference/openvla_oft``): a tiny OFT model built and
saved by OFT's own code in OFT's layout (:mod:`helpers.oft_checkpoint`) loads with ``load_vla`` and predicts the same
actions as OFT's ``predict_action`` (float32, atol 1e-5) for 1, 2 and 3 images, with and without proprio, L1 head
and discrete variant, and again with the projector and vision sites attached to both models.

Native (both stacks): shapes, padded batches, the attention variants, no host syncs, the sites on the native model
(counts, kept tokens at their original RoPE positions, exact undo), save / load round trip and loading errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.calls import run_and_kept
from helpers.positions import sharpen_attention

from prismatic_tr.models import NativeOpenVLAOFT, OFTSettings, build_oft_vla, build_processor, load_vla
from prismatic_tr.models.family import family_of
from prismatic_tr.models.oft_pass import action_sequence
from prismatic_tr.models.prompt import Prompt
from prismatic_tr.vla import apply_token_reduction_to_vla, remove_token_reduction, visual_token_count
from prismatic_tr.vla.locate import find_vision_backbone

ATOL = 1e-5


def prompt_ids(length: int, seed: int, vocab: int = 29000) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (1, length), generator=g)
    ids[0, 0] = 1  # BOS
    return ids


def pixels(images: int, seed: int, batch: int = 1) -> torch.Tensor:
    return torch.randn(batch, 6 * images, 224, 224, generator=torch.Generator().manual_seed(100 + seed))


# --- parity with OFT's own code (pins) ---


@pytest.fixture(scope="module")
def parity(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from helpers.oft_checkpoint import oft_reference, write_oft_checkpoint

    ref = oft_reference()
    base = tmp_path_factory.mktemp("oft")
    l1_dir = write_oft_checkpoint(ref, base / "l1")
    discrete_dir = write_oft_checkpoint(ref, base / "discrete", action_head=False)
    native, _ = load_vla(l1_dir)
    discrete, _ = load_vla(discrete_dir, oft={"platform": "libero"})
    return {**ref, "native": native, "discrete": discrete, "dir": l1_dir}


def reference_actions(ref: dict[str, Any], images: int, proprio: bool, l1: bool, seed: int) -> tuple:
    vla, c = ref["vla"], ref["constants"]
    vla.vision_backbone.set_num_images_in_input(images)
    ids = prompt_ids(12, seed)
    with torch.no_grad():
        return vla.predict_action(
            input_ids=ids, unnorm_key="oft_tiny", pixel_values=pixels(images, seed),
            attention_mask=torch.ones_like(ids),
            proprio=np.linspace(-1, 1, c.PROPRIO_DIM) if proprio else None,
            proprio_projector=ref["proprio_projector"] if proprio else None,
            action_head=ref["action_head"] if l1 else None,
        )


def native_actions(model: NativeOpenVLAOFT, images: int, proprio: bool, seed: int) -> tuple:
    model.vision_backbone.set_num_images_in_input(images)
    ids = prompt_ids(12, seed)
    return model.predict_action(input_ids=ids, unnorm_key="oft_tiny", pixel_values=pixels(images, seed),
                                proprio=np.linspace(-1, 1, 8) if proprio else None)


def act(vla: NativeOpenVLAOFT, **inputs: Any) -> np.ndarray:
    """The actions of ``predict_action``'s pair (OFT's convention: actions, slot hidden states)."""
    actions, _ = vla.predict_action(**inputs)
    return actions


@pytest.mark.parametrize("l1", [True, False], ids=["l1-head", "discrete"])
@pytest.mark.parametrize("proprio", [True, False], ids=["proprio", "no-proprio"])
@pytest.mark.parametrize("images", [1, 2, 3])
def test_native_oft_acts_as_ofts_own_code(parity, images, proprio, l1):
    model = parity["native"] if l1 else parity["discrete"]
    assert (model.action_head is not None) == l1 and model.proprio_projector is not None
    expected, expected_hidden = reference_actions(parity, images, proprio, l1, seed=images)
    actions, hidden = native_actions(model, images, proprio, seed=images)
    assert actions.shape == expected.shape == (8, 7) and len(np.unique(expected)) > 8, "a degenerate chunk"
    np.testing.assert_allclose(actions, expected, rtol=0, atol=ATOL)
    torch.testing.assert_close(hidden, expected_hidden, rtol=0, atol=ATOL)


REDUCTIONS = [  # site, method, keep, images
    ("projector", "topk_magnitude", 0.3, 2),
    ("projector", "spatial_pool", 0.25, 3),
    ("projector", "random", 0.5, 1),
    ("vision", "norm", 0.25, 2),
    ("vision", "diverse", 0.1, 3),
]


@pytest.mark.parametrize("site,method,keep,images", REDUCTIONS)
def test_reductions_act_alike_on_native_and_ofts_own_code(parity, site, method, keep, images):
    ref_vla, native = parity["vla"], parity["native"]
    depth = 0.5 if site == "vision" else None
    try:
        for vla in (ref_vla, native):
            vla.vision_backbone.set_num_images_in_input(images)
            apply_token_reduction_to_vla(vla, method, keep, site=site, depth_fraction=depth, seed=3)
        expected, _ = reference_actions(parity, images, True, True, seed=10 + images)
        actions, _ = native_actions(native, images, True, seed=10 + images)
        assert visual_token_count(native) == visual_token_count(ref_vla) < images * 256
    finally:
        remove_token_reduction(ref_vla)
        remove_token_reduction(native)
    np.testing.assert_allclose(actions, expected, rtol=0, atol=ATOL)
    unreduced, _ = native_actions(native, images, True, seed=10 + images)
    assert np.abs(unreduced - actions).max() > 1e-6, "the reduction must change the actions"


def test_dataset_statistics_replace_the_config_statistics(parity):
    assert parity["native"].norm_stats == json.loads((parity["dir"] / "dataset_statistics.json").read_text())
    assert parity["native"].oft == OFTSettings()  # LIBERO: chunk 8 x 7, proprio 8, L1 head, causal


# --- the native model on both stacks ---


def tiny(images: int = 1, proprio: bool = True, head: str = "l1_regression", attention: str = "causal",
         seed: int = 0) -> NativeOpenVLAOFT:
    settings = {"num_images_in_input": images, "proprio_dim": 8 if proprio else None, "action_head": head,
                "attention": attention}
    return build_oft_vla("tiny", oft=settings, seed=seed)


def tiny_inputs(images: int, batch: int = 1, length: int = 9, seed: int = 0) -> dict[str, Any]:
    ids = torch.cat([prompt_ids(length, seed + i, vocab=1000) for i in range(batch)])
    return {"input_ids": ids, "pixel_values": pixels(images, seed, batch), "unnorm_key": "bridge_orig"}


@pytest.mark.parametrize("attention", ["causal", "bidirectional", "bidirectional_actions"])
@pytest.mark.parametrize("head", ["l1_regression", "discrete"])
@pytest.mark.parametrize("images", [1, 3])
def test_shapes(images, head, attention):
    vla = tiny(images, head=head, attention=attention)
    assert family_of(vla).chunked and find_vision_backbone(vla).backbone is vla.vision_backbone
    assert vla.vision_backbone.get_num_patches() * vla.vision_backbone.get_num_images_in_input() == images * 256
    one = act(vla, **tiny_inputs(images), proprio=np.zeros(8))
    two, hidden = vla.predict_action(**tiny_inputs(images, batch=2), proprio=np.zeros((2, 8)))
    assert one.shape == (8, 7) and two.shape == (2, 8, 7) and hidden.shape == (2, 56, 64)
    assert np.isfinite(two).all()


@pytest.mark.parametrize("attention", ["causal", "bidirectional", "bidirectional_actions"])
def test_a_padded_batch_acts_as_each_prompt_alone(attention):
    vla = tiny(2, attention=attention)
    short, long = prompt_ids(6, 1, vocab=1000), prompt_ids(10, 2, vocab=1000)
    px, state = pixels(2, 0, batch=2), np.linspace(-1, 1, 16).reshape(2, 8)
    alone = [act(vla, input_ids=ids, pixel_values=px[i : i + 1], proprio=state[i], unnorm_key="bridge_orig")
             for i, ids in enumerate((short, long))]
    for side in ("left", "right"):
        padded = torch.zeros(2, 10, dtype=torch.long)
        mask = torch.zeros(2, 10, dtype=torch.long)
        lo = 4 if side == "left" else 0
        padded[0, lo : lo + 6], mask[0, lo : lo + 6] = short[0], 1
        padded[1], mask[1] = long[0], 1
        batch = act(vla, input_ids=padded, attention_mask=mask, pixel_values=px, proprio=state,
                    unnorm_key="bridge_orig")
        np.testing.assert_allclose(batch, np.stack(alone), rtol=0, atol=ATOL)


def test_attention_variants():
    """The first hidden state read (the last prompt token's) sees only the prompt under "causal" and
    "bidirectional_actions"; later ones see later slots under the bidirectional variants only."""
    hidden = {}
    for attention in ("causal", "bidirectional", "bidirectional_actions"):
        vla = tiny(1, attention=attention)
        hidden[attention] = vla.predict_action(**tiny_inputs(1), proprio=np.zeros(8))[1]
    causal, both, actions = hidden["causal"], hidden["bidirectional"], hidden["bidirectional_actions"]
    torch.testing.assert_close(actions[:, 0], causal[:, 0], rtol=0, atol=1e-6)
    assert (actions[:, 1:] - causal[:, 1:]).abs().max() > 1e-4
    assert (both[:, 0] - causal[:, 0]).abs().max() > 1e-4


def test_action_sequence_layout():
    ids = torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0]])
    seq = action_sequence(Prompt(ids, torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]).bool()), num_slots=3, stop_token_id=2)
    assert seq.ids.tolist() == [[1, 5, 6, 7, 1, 1, 1, 2], [1, 8, 1, 1, 1, 2, 0, 0]]
    assert seq.slot.long().tolist() == [[0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0, 0, 0]]
    assert seq.prompt_len.flatten().tolist() == [4, 2]


def test_the_parallel_pass_has_no_host_sync():
    from prismatic_tr.bench.measure.ops import find_host_syncs

    vla = tiny(2, attention="bidirectional_actions")
    inputs = tiny_inputs(2, batch=2)
    mask = torch.ones_like(inputs["input_ids"])
    mask[0, :2] = 0
    prompt = vla.make_prompt(inputs["input_ids"], mask, for_actions=True)
    apply_token_reduction_to_vla(vla, "diverse", 0.25, site="vision", depth_fraction=0.5)
    try:
        with torch.no_grad():
            syncs = find_host_syncs(lambda: vla.run_action_pass(
                prompt, vla.embed_observation(inputs["pixel_values"], torch.zeros(2, 8))))
    finally:
        remove_token_reduction(vla)
    assert not syncs, syncs


@pytest.mark.parametrize("site", [None, "projector", "vision", "llm"])
def test_the_pass_compiles_to_whole_graphs(site):
    """With every site attached, the observation (towers, the site, projector, proprio) and the language model's one
    pass each compile to ONE graph (``fullgraph=True``: no graph break, static shapes; the llm site's drop inside the
    pass included), and the chunk is the eager one. Left eager: the slot layout and the per-call mask hooks that
    ``run_decoder`` registers around the language model (hook registration cannot be traced)."""
    import torch._dynamo

    if site in ("projector", "llm") and tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 4):
        pytest.skip(f"torch {torch.__version__}'s dynamo cannot trace the {site} site's backbone hook (a frozen "
                    "dataclass built in the call, a callable object as a hook); the newest stack compiles it whole")
    vla = tiny(2)
    inputs = tiny_inputs(2)
    prompt = vla.make_prompt(inputs["input_ids"], None, for_actions=True)
    state = torch.linspace(-1, 1, 8)[None]
    decoder = vla.language_model.model

    def chunk(embed: Any) -> torch.Tensor:
        return vla.action_head.predict_action(vla.run_action_pass(prompt, embed(inputs["pixel_values"], state)))

    if site is not None:
        apply_token_reduction_to_vla(vla, "diverse" if site != "llm" else "attention", 0.25, site=site,
                                     depth_fraction=0.5 if site != "projector" else None)
    try:
        with torch.no_grad():
            want = chunk(vla.embed_observation)
            torch._dynamo.reset()
            decoder.forward = torch.compile(decoder.forward, fullgraph=True, backend="aot_eager")
            got = chunk(torch.compile(vla.embed_observation, fullgraph=True, backend="aot_eager"))
    finally:
        decoder.__dict__.pop("forward", None)
        remove_token_reduction(vla)
        torch._dynamo.reset()
    assert got.shape == want.shape == (1, 8, 7)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("site,method,images", [("projector", "topk_magnitude", 2), ("projector", "spatial_pool", 3),
                                                ("vision", "diverse", 2), ("vision", "norm", 1)])
def test_sites_on_the_native_model(site, method, images):
    vla = tiny(images)
    inputs = tiny_inputs(images)
    before = act(vla, **inputs, proprio=np.zeros(8))
    keys = list(vla.state_dict())
    seen: dict[str, Any] = {}
    hook = vla.projector.register_forward_hook(lambda m, a, out: seen.__setitem__("visual", out.shape[1]))
    try:
        apply_token_reduction_to_vla(vla, method, 0.25, site=site, depth_fraction=0.5 if site == "vision" else None)
        reduced, kept = run_and_kept(vla, lambda: act(vla, **inputs, proprio=np.zeros(8)))
        k = vla.vision_backbone.get_num_patches()
        assert k == 64 and visual_token_count(vla) == images * k == seen["visual"] == kept.shape[1]
        assert vla.vision_backbone.get_num_images_in_input() == images
        assert reduced.shape == (8, 7) and np.abs(reduced - before).max() > 1e-7
    finally:
        hook.remove()
        remove_token_reduction(vla)
    assert np.array_equal(act(vla, **inputs, proprio=np.zeros(8)), before), "undo must be exact"
    assert list(vla.state_dict()) == keys and vla.vision_backbone.get_num_patches() == 256


@pytest.mark.parametrize("site,images", [("projector", 2), ("vision", 3)])
def test_kept_tokens_keep_their_original_positions(site, images):
    """The one pass equals the language model run by hand at the unreduced sequence's position ids:
    BOS 0, kept visual token j at 1 + kept[j], proprio, prompt, slots and stop after all N visual tokens."""
    vla = tiny(images)
    sharpen_attention(vla.language_model)
    inputs = tiny_inputs(images)
    seen: dict[str, Any] = {}

    def grab(module: Any, args: Any, kwargs: dict, out: Any) -> None:
        seen["embeds"], seen["hidden"] = kwargs["inputs_embeds"], out.last_hidden_state

    hook = vla.language_model.model.register_forward_hook(grab, with_kwargs=True)
    try:
        apply_token_reduction_to_vla(vla, "random", 0.25, site=site, depth_fraction=0.5 if site == "vision" else None)
        _, kept = run_and_kept(vla, lambda: act(vla, **inputs, proprio=np.zeros(8)))
    finally:
        hook.remove()
        remove_token_reduction(vla)
    n_visual, n_original = kept.shape[1], 256 * images
    t = seen["embeds"].shape[1]
    original = torch.arange(t)[None].clone()
    original[:, 1 : 1 + n_visual] = 1 + kept
    original[:, 1 + n_visual :] += n_original - n_visual

    def by_hand(ids: torch.Tensor) -> torch.Tensor:  # an all-ones mask: transformers 5 reads no packed sequences
        with torch.no_grad():
            return vla.language_model.model(inputs_embeds=seen["embeds"], attention_mask=torch.ones(1, t),
                                            position_ids=ids).last_hidden_state

    torch.testing.assert_close(seen["hidden"], by_hand(original), rtol=1e-5, atol=1e-5)
    assert (seen["hidden"] - by_hand(torch.arange(t)[None])).abs().max() > 1e-2, "the test is not sensitive"


def blind_after(layer: int, kept: torch.Tensor, num_visual: int) -> Any:
    """A stand-in for ``oft.every_layer_gets``: layers before ``layer`` get the pass's mask (an explicit causal one
    when it is None), later layers the same with the visual positions 1 .. num_visual not in ``kept`` masked as
    keys: the unpruned pass in which the tokens the llm site dropped are invisible from ``layer`` on."""
    import contextlib

    @contextlib.contextmanager
    def every_layer_gets(lm: Any, bias: torch.Tensor | None) -> Any:
        def mask_for(i: int, hidden: torch.Tensor) -> torch.Tensor:
            t = hidden.shape[1]
            low = torch.finfo(hidden.dtype).min
            base = bias if bias is not None else torch.full((t, t), low, dtype=hidden.dtype).triu(1)[None, None]
            columns = torch.zeros(t, dtype=torch.bool)
            columns[1 : 1 + num_visual] = True
            columns[kept] = False
            return base.masked_fill(columns, low) if i >= layer else base

        def hook(i: int) -> Any:
            return lambda m, args, kwargs: (args, {**kwargs, "attention_mask": mask_for(i, kwargs["hidden_states"]
                                                                                      if "hidden_states" in kwargs
                                                                                      else args[0])})
        hooks = [m.register_forward_pre_hook(hook(i), with_kwargs=True, prepend=True)
                 for i, m in enumerate(lm.model.layers)]
        try:
            yield
        finally:
            for h in hooks:
                h.remove()

    return every_layer_gets


@pytest.mark.parametrize("attention", ["causal", "bidirectional_actions"])
def test_the_llm_site_drops_visual_tokens_inside_the_one_pass(attention, monkeypatch):
    """The pass with the llm site (keep 0.25 after layer 1 of 2) equals the unpruned pass in which the dropped
    visual tokens are invisible from layer 1 on (at their original positions, action slots read unmoved); the
    proprio token and the prompt are never dropped; undo is exact; no host sync."""
    from prismatic_tr.bench.measure.ops import find_host_syncs
    from prismatic_tr.models import oft as oft_module
    from prismatic_tr.vla.scope import reduction_call

    vla = tiny(2, attention=attention)
    sharpen_attention(vla.language_model)
    inputs, state = tiny_inputs(2), np.linspace(-1, 1, 8)
    before, before_hidden = vla.predict_action(**inputs, proprio=state)
    keys = list(vla.state_dict())
    apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.25, depth_fraction=0.5)
    try:
        assert visual_token_count(vla) == 512  # the projector still hands the pass every token
        with torch.no_grad(), reduction_call(vla) as call:
            actions, hidden = vla.predict_action(**inputs, proprio=state)
        kept = call.llm_kept
        assert kept.shape == (1, 128) and torch.all(kept.diff(dim=1) > 0) and int(kept.max()) < 512
        prompt = vla.make_prompt(inputs["input_ids"], None, for_actions=True)
        observation = vla.embed_observation(inputs["pixel_values"], torch.as_tensor(state[None], dtype=torch.float32))
        syncs = find_host_syncs(lambda: vla.run_action_pass(prompt, observation))
        assert not syncs, syncs
    finally:
        remove_token_reduction(vla)
    assert np.array_equal(act(vla, **inputs, proprio=state), before), "undo must be exact"
    assert list(vla.state_dict()) == keys
    monkeypatch.setattr(oft_module, "every_layer_gets", blind_after(1, 1 + kept[0], 512))
    ref_actions, ref_hidden = vla.predict_action(**inputs, proprio=state)
    torch.testing.assert_close(hidden, ref_hidden, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(actions, ref_actions, rtol=0, atol=ATOL)
    assert (hidden - before_hidden).abs().max() > 1e-3, "the test is not sensitive"


def test_the_llm_site_is_refused_on_ofts_own_model_code():
    """A model whose predict_action takes an action_head but does not announce its pass (OFT's own code)."""
    from prismatic_tr.vla.sites.llm import LLMSiteHandle

    vla = tiny()
    vla.__dict__["llm_site_in_pass"] = False  # as OFT's OpenVLAForActionPrediction, which lacks the attribute
    with pytest.raises(ValueError, match="OpenVLA-OFT's own model code"):
        apply_token_reduction_to_vla(vla, site="llm", reduction_ratio=0.5)
    assert LLMSiteHandle is not None


# --- persistence and loading errors ---


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[NativeOpenVLAOFT, Path]:
    vla = tiny(2, attention="bidirectional_actions", seed=5)
    out = tmp_path_factory.mktemp("native_oft")
    vla.save_pretrained(out)
    build_processor(vla.config).save_pretrained(out)
    return vla, out


def test_save_and_load_round_trip(saved):
    vla, out = saved
    names = sorted(p.name for p in out.iterdir())
    assert {"action_head--latest_checkpoint.pt", "proprio_projector--latest_checkpoint.pt",
            "dataset_statistics.json", "config.json", "model.safetensors"} <= set(names)
    loaded, _ = load_vla(out)
    assert isinstance(loaded, NativeOpenVLAOFT) and loaded.oft == vla.oft
    inputs = tiny_inputs(2)
    assert np.array_equal(act(loaded, **inputs, proprio=np.ones(8)), act(vla, **inputs, proprio=np.ones(8)))


def copy_checkpoint(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("change,message", [
    ("drop_key", "missing keys: model.fc2.bias"),
    ("extra_key", "unexpected keys: model.extra"),
    ("second_head", "2 action_head checkpoints"),
    ("film", "FiLM is not built"),
    ("diffusion", "diffusion action head is not built"),
    ("no_proprio", "no proprio_projector--"),
])
def test_loading_errors(saved, tmp_path, change, message):
    out = copy_checkpoint(saved[1], tmp_path / "ckpt")
    head = out / "action_head--latest_checkpoint.pt"
    if change in ("drop_key", "extra_key"):
        state = torch.load(head, weights_only=True)
        if change == "drop_key":
            del state["model.fc2.bias"]
        else:
            state["model.extra"] = torch.zeros(1)
        torch.save(state, head)
    elif change == "second_head":
        torch.save({}, out / "action_head--100_checkpoint.pt")
    elif change == "film":
        torch.save({}, out / "vision_backbone--latest_checkpoint.pt")
    elif change == "diffusion":
        torch.save({}, out / "noisy_action_projector--latest_checkpoint.pt")
    else:
        (out / "proprio_projector--latest_checkpoint.pt").unlink()
    with pytest.raises(ValueError, match=message):
        load_vla(out)


def test_proprio_slots_give_every_slot_the_state_token(tmp_path):
    """``proprio_slots``: the slots' inputs are the proprio token (OFT's are zero), so the state changes the actions
    where OFT's model with the same weights differs; it survives a save and load, needs a state and is refused
    without a proprio projector."""
    vla = build_oft_vla("tiny", oft={"num_images_in_input": 2, "proprio_slots": True}, seed=3)
    plain = build_oft_vla("tiny", oft={"num_images_in_input": 2}, seed=3)
    assert vla.oft.proprio_slots and not plain.oft.proprio_slots
    inputs, state = tiny_inputs(2), np.linspace(-1, 1, 8)
    seen: dict[str, torch.Tensor] = {}

    def keep(module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        seen["x"] = kwargs.get("hidden_states", args[0] if args else None)

    hook = vla.language_model.model.layers[0].register_forward_pre_hook(keep, with_kwargs=True)
    actions = act(vla, **inputs, proprio=state)
    hook.remove()
    token = vla.proprio_projector(torch.as_tensor(state, dtype=torch.float32)[None])
    slots = seen["x"][0, -57:-1]  # the 56 slots before the stop token
    torch.testing.assert_close(slots, token.expand(56, -1), rtol=0, atol=0)
    assert np.abs(actions - act(plain, **inputs, proprio=state)).max() > 1e-4
    vla.save_pretrained(tmp_path)
    build_processor(vla.config).save_pretrained(tmp_path)
    loaded, _ = load_vla(tmp_path)
    assert loaded.oft.proprio_slots
    np.testing.assert_array_equal(act(loaded, **inputs, proprio=state), actions)
    with pytest.raises(ValueError, match="proprio is required"):
        act(vla, **inputs)
    with pytest.raises(ValueError, match="proprio_slots=True needs a proprio state"):
        OFTSettings(proprio_dim=None, proprio_slots=True)
    with pytest.raises(ValueError, match="proprio_slots='yes'"):
        OFTSettings(proprio_slots="yes")


def test_oft_checkpoints_load_natively_only(saved):
    with pytest.raises(ValueError, match="OpenVLA-OFT checkpoint"):
        load_vla(saved[1], native=False)


@pytest.mark.parametrize("field,value", [
    ("num_images_in_input", 4), ("num_images_in_input", 0), ("attention", "full"), ("action_head", "diffusion"),
    ("proprio_dim", -1), ("normalization", "normal"), ("platform", "droid"), ("chunk", 8),
])
def test_bad_settings(field, value):
    with pytest.raises(ValueError, match=repr(value) if field != "chunk" else "unknown OFT setting"):
        OFTSettings.from_dict({field: value})


def test_bad_image_count_and_pixels():
    vla = tiny(2)
    with pytest.raises(ValueError, match="num_images_in_input=4"):
        vla.vision_backbone.set_num_images_in_input(4)
    with pytest.raises(ValueError, match=r"expected \(B, 12, H, W\)"):
        act(vla, **{**tiny_inputs(2), "pixel_values": pixels(1, 0)})
    with pytest.raises(ValueError, match="no proprio projector"):
        act(tiny(proprio=False), **tiny_inputs(1), proprio=np.zeros(8))


def test_oft_presets():
    from prismatic_tr.models import build_vla

    vla = build_vla("tiny-oft")
    assert isinstance(vla, NativeOpenVLAOFT) and vla.config.prismatic_tr_preset == "tiny-oft"
    assert vla.vision_backbone.get_num_images_in_input() == 2 and vla.oft.num_action_slots == 56
    assert act(vla, **tiny_inputs(2), proprio=np.zeros(8)).shape == (8, 7)
    with torch.device("meta"):
        bench = build_vla("cpu-bench-oft")
    assert bench.language_model.config.hidden_size == 2048 and bench.language_model.config.num_hidden_layers == 8
    assert bench.vision_backbone.get_num_images_in_input() == 2 and bench.proprio_projector.proprio_dim == 8
    assert bench.action_head.model.fc1.in_features == 7 * 2048
    with pytest.raises(ValueError, match="cpu-bench-oft"):
        build_vla("no-such-preset")


def test_oft_settings_need_local_files():
    with pytest.raises(ValueError, match="native loading"):
        load_vla("someone/not-cached-oft-model", oft={"platform": "libero"})


@pytest.mark.parametrize("site", [None, "vision"])
def test_images_batched_through_the_towers_equal_one_by_one(site):
    """The native backbone runs the n images as one batch of n * B rows; OFT's code runs them one by one. Same
    tokens (float rounding), and under the vision site the same patches kept per image."""
    from prismatic_tr.vla.scope import reduction_call

    vla = tiny(3)
    px = pixels(3, 4, batch=2)
    if site:
        apply_token_reduction_to_vla(vla, "diverse", 0.25, site=site, depth_fraction=0.5)
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            batched = vla.vision_backbone(px)
        one_by_one, kept = [], []
        vla.vision_backbone.set_num_images_in_input(1)  # OFT's loop: one backbone call per image
        for img in torch.split(px, 6, dim=1):
            with torch.no_grad(), reduction_call(vla) as each:
                one_by_one.append(vla.vision_backbone(img))
            kept.append(each.kept)
    finally:
        vla.vision_backbone.set_num_images_in_input(3)
        remove_token_reduction(vla)
    torch.testing.assert_close(batched, torch.cat(one_by_one, dim=1), rtol=1e-5, atol=1e-5)
    if site:
        assert torch.equal(call.kept, torch.cat([k + m * 256 for m, k in enumerate(kept)], dim=1))


# --- an unmerged LoRA (OFT's lora_adapter/ without merged weights) ---


def write_unmerged(vla: NativeOpenVLAOFT, base: Path, out: Path) -> NativeOpenVLAOFT:
    """``vla`` saved as the base, then a LoRA on every linear layer of its towers, projector and Llama (OFT's
    finetune.py: "all-linear") with non-zero weights saved as ``out/lora_adapter`` beside new heads and the statistics (no model
    weights in ``out``); returns the model with the LoRA merged and the new heads: what loading ``out`` must give."""
    import copy

    from peft import LoraConfig, get_peft_model

    vla.save_pretrained(base)
    build_processor(vla.config).save_pretrained(base)
    tuned = copy.deepcopy(vla)
    weights = tuned.weights_module()
    # every linear layer but the LM head: OFT's "all-linear" (which PEFT 0.11 takes on transformers models only)
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in weights.named_modules() if isinstance(m, torch.nn.Linear)}
                    - {"lm_head"})
    peft = get_peft_model(weights, LoraConfig(r=4, lora_alpha=8, target_modules=linear, init_lora_weights="gaussian"))
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(len(name))) * 0.02)
    peft.peft_config["default"].base_model_name_or_path = str(base)
    peft.save_pretrained(out / "lora_adapter")
    peft.merge_and_unload()
    with torch.no_grad():
        for p in [*tuned.action_head.parameters(), *tuned.proprio_projector.parameters()]:
            p.add_(0.01)
    from prismatic_tr.models.oft_checkpoint import save_components

    save_components(tuned, out)
    return tuned


def test_an_unmerged_lora_checkpoint_loads_merged_onto_its_base(tmp_path):
    vla = tiny(2, seed=7)
    tuned = write_unmerged(vla, tmp_path / "base", tmp_path / "ckpt")
    assert not any((tmp_path / "ckpt").glob("*.safetensors"))
    loaded, processor = load_vla(tmp_path / "ckpt")  # the base recorded in the adapter
    inputs = tiny_inputs(2)
    want = act(tuned, **inputs, proprio=np.ones(8))
    np.testing.assert_allclose(act(loaded, **inputs, proprio=np.ones(8)), want, rtol=0, atol=ATOL)
    assert np.abs(want - act(vla, **inputs, proprio=np.ones(8))).max() > 1e-4, "the LoRA changes nothing"
    assert processor is not None
    again, _ = load_vla(tmp_path / "ckpt", base=tmp_path / "base")
    np.testing.assert_allclose(act(again, **inputs, proprio=np.ones(8)), want, rtol=0, atol=ATOL)


def test_an_unmerged_lora_checkpoint_names_what_is_wrong(tmp_path):
    import shutil

    vla = tiny(2, seed=7)
    write_unmerged(vla, tmp_path / "base", tmp_path / "ckpt")
    with pytest.raises(ValueError, match="pass base="):
        load_vla(tmp_path / "ckpt", base=tmp_path / "nowhere")
    other = tmp_path / "other_base"  # a base with one Llama layer fewer: the adapter's layer-1 tensors match nothing
    small = build_oft_vla("tiny", oft={"num_images_in_input": 2}, seed=1)
    small.language_model.model.layers = small.language_model.model.layers[:1]
    small.config.text_config.num_hidden_layers = 1
    small.save_pretrained(other)
    shutil.copy(tmp_path / "base" / "preprocessor_config.json", other)
    with pytest.raises(ValueError, match="saved tensors matching no layer"):
        load_vla(tmp_path / "ckpt", base=other)


def test_an_unmerged_lora_saved_by_ofts_code_loads_as_ofts_merge_gives(tmp_path):
    """Pins: LoRA "all-linear" on OFT's own model (as its finetune.py), saved as lora_adapter/ beside OFT's heads and
    statistics; the native load onto the base equals OFT's merged model (merge_and_unload) acting."""
    from helpers.oft_checkpoint import oft_reference, save_component, write_oft_checkpoint
    from peft import LoraConfig, get_peft_model

    ref = oft_reference()
    base = write_oft_checkpoint(ref, tmp_path / "base")
    before, _ = native_actions(load_vla(base)[0], 2, True, seed=2)
    peft = get_peft_model(ref["vla"], LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                 init_lora_weights="gaussian"))
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(len(name))) * 0.02)
    out = tmp_path / "unmerged"
    peft.save_pretrained(out / "lora_adapter")
    save_component(ref["action_head"], out / "action_head--150000_checkpoint.pt")
    save_component(ref["proprio_projector"], out / "proprio_projector--150000_checkpoint.pt")
    (out / "dataset_statistics.json").write_text(json.dumps(ref["vla"].norm_stats))
    ref["vla"] = peft.merge_and_unload()
    loaded, _ = load_vla(out, base=base)
    expected, _ = reference_actions(ref, 2, True, True, seed=2)
    actions, _ = native_actions(loaded, 2, True, seed=2)
    np.testing.assert_allclose(actions, expected, rtol=0, atol=ATOL)
    assert np.abs(actions - before).max() > 1e-4, "the LoRA changes nothing"
