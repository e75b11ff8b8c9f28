"""Token reduction on OpenVLA-OFT's own model code: the hidden states OFT hands its action head stay right.

OFT's ``predict_action`` appends ``ACTION_DIM * NUM_ACTIONS_CHUNK`` action placeholders (zeroed embeddings) and
a stop token to the prompt, runs the LLM, and slices the last hidden states at
``NUM_PATCHES + NUM_PROMPT_TOKENS`` with ``NUM_PATCHES = get_num_patches() * get_num_images_in_input()``
(+1 with a proprio token). Position p's hidden state is the one that predicts token p + 1 (OFT trains it so,
reading ``hidden[:, num_patches:-1]`` under ``labels[:, 1:]``), so the slice must start one position before
the first placeholder. These tests find the placeholders where they really sit in the ``inputs_embeds`` the LLM
receives and check that slice, with 1, 2 and 3 images, with reductions attached before or after the image
count is set. Needs ``../shared/reference/openvla_oft`` and OpenVLA's pins (skips otherwise).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from helpers.calls import run_and_kept
from helpers.oft_checkpoint import import_action_heads
from helpers.reference_clients import import_openvla_oft
from helpers.reference_models import UNNORM_KEY, build_reference_vla, require_remote_code_stack

from prismatic_tr.vla import apply_token_reduction_to_vla, get_token_reduction, remove_token_reduction

# images, method (None: no reduction), ratio, merge size, proprio token, L1 head (else OFT's discrete path),
# patch tokens kept per image
CASES = [
    (1, None, 1.0, 2, True, True, 256),
    (3, None, 1.0, 2, True, True, 256),
    (1, "topk_magnitude", 0.3, 2, False, True, 77),
    (2, "topk_magnitude", 0.3, 2, True, True, 77),
    (3, "topk_magnitude", 0.3, 2, True, True, 77),  # issue 9: the projector got 230, OFT counted 228
    (3, "attention_score", 0.5, 2, False, False, 128),
    (2, "random", 0.25, 2, True, True, 64),
    (3, "random", 0.1, 2, False, True, 26),
    (1, "spatial_pool", 0.5, 2, True, True, 64),
    (3, "spatial_pool", 0.5, 2, True, False, 64),
    (2, "spatial_pool", 0.5, 4, False, True, 16),
]


@pytest.fixture(scope="module")
def oft() -> dict[str, Any]:
    require_remote_code_stack()
    modeling = import_openvla_oft("prismatic.extern.hf.modeling_prismatic")
    configuration = import_openvla_oft("prismatic.extern.hf.configuration_prismatic")
    constants = import_openvla_oft("prismatic.vla.constants")  # platform picked from sys.argv (LIBERO here)
    heads = import_action_heads()
    projectors = import_openvla_oft("prismatic.models.projectors")
    vla = build_reference_vla(modeling, configuration, action_dim=constants.ACTION_DIM)
    llm_dim = vla.llm_dim
    torch.manual_seed(1)
    return {
        "vla": vla,
        "c": constants,
        "head": heads.L1RegressionActionHead(input_dim=llm_dim, hidden_dim=llm_dim, action_dim=constants.ACTION_DIM),
        "proprio_projector": projectors.ProprioProjector(llm_dim=llm_dim, proprio_dim=constants.PROPRIO_DIM),
    }


def run_predict_action(oft: dict[str, Any], images: int, proprio: bool, l1_head: bool) -> dict[str, Any]:
    """OFT's ``predict_action`` on one sample; returns what it hands on and what the LLM and projector saw."""
    vla, c = oft["vla"], oft["c"]
    g = torch.Generator().manual_seed(images)
    prompt = torch.randint(3, 29000, (1, 12), generator=g)
    prompt[0, 0] = 1  # BOS; predict_action appends the empty token 29871
    seen: dict[str, Any] = {}

    def llm_hook(module: Any, args: Any, kwargs: dict, output: Any) -> None:
        seen["embeds"], seen["hidden"] = kwargs["inputs_embeds"], output.hidden_states[-1]

    hooks = [
        vla.language_model.register_forward_hook(llm_hook, with_kwargs=True),
        vla.projector.register_forward_hook(lambda m, a, out: seen.__setitem__("visual", out.shape[1])),
        oft["head"].model.register_forward_pre_hook(lambda m, a: seen.__setitem__("head_input", a[0])),
    ]
    try:
        with torch.no_grad():
            actions, handed = vla.predict_action(
                input_ids=prompt,
                unnorm_key=UNNORM_KEY,
                proprio=np.linspace(-1, 1, c.PROPRIO_DIM) if proprio else None,
                proprio_projector=oft["proprio_projector"] if proprio else None,
                action_head=oft["head"] if l1_head else None,
                pixel_values=torch.randn(1, 6 * images, 224, 224, generator=g),
                attention_mask=torch.ones_like(prompt),
            )
    finally:
        for h in hooks:
            h.remove()
    return dict(seen, actions=actions, handed=handed, prompt_len=prompt.shape[1] + 1)


def check_action_positions(oft: dict[str, Any], out: dict[str, Any], proprio: bool, l1_head: bool) -> None:
    c = oft["c"]
    slots = c.ACTION_DIM * c.NUM_ACTIONS_CHUNK
    placeholder = (out["embeds"][0] == 0).all(dim=-1).nonzero().flatten()  # zeroed action embeddings
    first = int(placeholder[0])
    assert placeholder.tolist() == list(range(first, first + slots)), "placeholders must form one block"
    # [BOS] [visual tokens] [proprio] [prompt after BOS, with 29871] [placeholders] [stop]
    assert first == 1 + out["visual"] + int(proprio) + out["prompt_len"] - 1
    expected = out["hidden"][:, first - 1 : first - 1 + slots]
    assert torch.equal(out["handed"], expected), "OFT must read the hidden states right before each placeholder"
    if l1_head:
        assert torch.equal(out["head_input"], expected.reshape(1, c.NUM_ACTIONS_CHUNK, -1))
    assert out["actions"].shape == (c.NUM_ACTIONS_CHUNK, c.ACTION_DIM) and np.isfinite(out["actions"]).all()


@pytest.mark.parametrize("attach_first", [False, True], ids=["images-then-attach", "attach-then-images"])
@pytest.mark.parametrize("images,method,ratio,merge,proprio,l1_head,k", CASES)
def test_oft_reads_its_action_hidden_states_at_the_real_positions(
    oft, attach_first, images, method, ratio, merge, proprio, l1_head, k
):
    vla = oft["vla"]
    backbone = vla.vision_backbone
    try:
        if attach_first and method is not None:
            apply_token_reduction_to_vla(vla, method, ratio, merge)
        backbone.set_num_images_in_input(images)
        if not attach_first and method is not None:
            apply_token_reduction_to_vla(vla, method, ratio, merge)
        out = run_predict_action(oft, images, proprio, l1_head)
        assert out["visual"] == images * k == backbone.get_num_patches() * backbone.get_num_images_in_input()
        check_action_positions(oft, out, proprio, l1_head)
    finally:
        remove_token_reduction(vla)
        backbone.set_num_images_in_input(1)


def test_the_image_count_can_change_while_attached(oft):
    vla = oft["vla"]
    backbone = vla.vision_backbone
    apply_token_reduction_to_vla(vla, "topk_magnitude", 0.3)
    try:
        for images in (3, 1, 2):
            backbone.set_num_images_in_input(images)
            out = run_predict_action(oft, images, proprio=True, l1_head=True)
            assert out["visual"] == images * 77
            check_action_positions(oft, out, proprio=True, l1_head=True)
    finally:
        remove_token_reduction(vla)
        backbone.set_num_images_in_input(1)
    assert not hasattr(backbone, "_prismatic_tr_handle") and backbone.get_num_patches() == 256


# --- positions: OFT's one parallel pass sees every token where it sits without reduction ---

POSITION_CASES = [  # site, method, keep, images, proprio
    ("projector", "random", 0.5, 1, True),
    ("projector", "topk_magnitude", 0.3, 3, True),
    ("projector", "spatial_pool", 0.25, 2, False),
    ("vision", "norm", 0.25, 2, True),
]


@pytest.fixture(scope="module")
def sharp_oft(oft: dict[str, Any]) -> dict[str, Any]:
    from helpers.positions import sharpen_attention

    # a model of its own (a deep copy would keep OpenVLA's tower forwards, closures over the original towers)
    modeling = import_openvla_oft("prismatic.extern.hf.modeling_prismatic")
    configuration = import_openvla_oft("prismatic.extern.hf.configuration_prismatic")
    vla = build_reference_vla(modeling, configuration, action_dim=oft["c"].ACTION_DIM)
    sharpen_attention(vla.language_model)
    return {**oft, "vla": vla}


def reference_hidden(vla: Any, out: dict[str, Any], ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return vla.language_model(inputs_embeds=out["embeds"], attention_mask=out["mask"], position_ids=ids,
                                  output_hidden_states=True).hidden_states[-1]


@pytest.mark.parametrize("site,method,keep,images,proprio", POSITION_CASES)
def test_oft_parallel_pass_runs_at_original_positions(sharp_oft, site, method, keep, images, proprio):
    vla = sharp_oft["vla"]
    backbone = vla.vision_backbone
    mask_hook = vla.language_model.register_forward_pre_hook(
        lambda m, a, kw: sharp_oft.__setitem__("mask", kw["attention_mask"]), with_kwargs=True)
    try:
        backbone.set_num_images_in_input(images)
        apply_token_reduction_to_vla(vla, method, keep, site=site, depth_fraction=0.5 if site == "vision" else None)
        out, kept = run_and_kept(vla, lambda: run_predict_action(sharp_oft, images, proprio, l1_head=True))
        out["mask"] = sharp_oft.pop("mask")
    finally:
        mask_hook.remove()
        remove_token_reduction(vla)
        backbone.set_num_images_in_input(1)
    n_visual, n_original = kept.shape[1], 256 * images
    assert out["visual"] == n_visual
    compact = torch.arange(out["embeds"].shape[1])[None]
    original = compact.clone().to(kept.dtype)
    original[:, 1 : 1 + n_visual] = 1 + kept  # proprio, prompt, placeholders and stop follow all N tokens
    original[:, 1 + n_visual :] += n_original - n_visual
    torch.testing.assert_close(out["hidden"], reference_hidden(vla, out, original), rtol=1e-5, atol=1e-5)
    assert (out["hidden"] - reference_hidden(vla, out, compact)).abs().max() > 1e-2, "the test is not sensitive"
    check_action_positions(sharp_oft, out, proprio, l1_head=True)


def test_oft_refuses_the_llm_site(oft):
    with pytest.raises(ValueError, match="OpenVLA-OFT"):
        apply_token_reduction_to_vla(oft["vla"], site="llm", reduction_ratio=0.5)
    assert get_token_reduction(oft["vla"], site="llm") is None
