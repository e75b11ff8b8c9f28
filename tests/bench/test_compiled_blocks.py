"""``benchmark.py --compile``: compiled blocks give the eager model's actions under every site attached *after*
compiling (the hooks stay eager, nothing compiled goes stale), and removal restores every forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from experiments.robot.token_reduction_utils import apply_token_reduction_to_vla, remove_token_reduction
from prismatic_tr.bench.vla.compiled import compile_blocks, compiled_modules
from prismatic_tr.bench.vla.job import sample_inputs
from prismatic_tr.models import build_processor, build_vla
from vla_scripts import benchmark  # the command

SETTINGS = [None, dict(method="topk_magnitude", reduction_ratio=0.5),
            dict(site="vision", reduction_ratio=0.25, depth_fraction=0.5),
            dict(site="llm", reduction_ratio=0.5, depth_fraction=0.5)]


@pytest.fixture(scope="module")
def model_and_inputs():
    vla = build_vla("tiny", seed=0).eval()
    processor = build_processor(vla.config)
    inputs = sample_inputs(processor, "pick up the red block", 1, int(vla.config.image_sizes[0]), seed=0)
    return vla, inputs


def _actions(vla, inputs, setting) -> tuple[np.ndarray, torch.Tensor]:
    if setting is not None:
        apply_token_reduction_to_vla(vla, **setting)
    try:
        with torch.no_grad():
            projected = vla.embed_images(inputs["pixel_values"])
        return np.asarray(vla.predict_action(**inputs, unnorm_key="bridge_orig")), projected
    finally:
        if setting is not None:
            remove_token_reduction(vla)


@pytest.mark.slow
def test_compiled_blocks_follow_every_site_attached_after_compiling(model_and_inputs) -> None:
    vla, inputs = model_and_inputs
    eager = [_actions(vla, inputs, s) for s in SETTINGS]
    modules = compiled_modules(vla)
    n_blocks = sum(len(t.blocks) for t in (vla.vision_backbone.featurizer, vla.vision_backbone.fused_featurizer))
    assert len(modules) == n_blocks + 1 + len(vla.language_model.model.layers)
    limit = torch._dynamo.config.cache_size_limit
    handle = compile_blocks(vla, backend="aot_eager")
    try:
        assert all("forward" in m.__dict__ for m in modules) and torch._dynamo.config.cache_size_limit >= 4096
        for _ in range(2):  # second round: the cached graphs of each setting are reused
            for setting, (want_actions, want_projected) in zip(SETTINGS, eager, strict=True):
                actions, projected = _actions(vla, inputs, setting)
                assert projected.shape == want_projected.shape, setting
                torch.testing.assert_close(projected, want_projected, rtol=1e-5, atol=1e-5)
                np.testing.assert_array_equal(actions, want_actions, err_msg=str(setting))
    finally:
        handle.remove()
    assert not any("forward" in m.__dict__ for m in modules)
    assert torch._dynamo.config.cache_size_limit == limit
    handle.remove()  # twice is harmless


def test_compile_needs_a_warmup_round(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        benchmark.parse_config(["--compile", "true", "--warmup", "0"])
    assert exc.value.code == 2 and "--compile true needs --warmup >= 1" in capsys.readouterr().err


def test_freeze_needs_compile_and_inductor(capsys, model_and_inputs) -> None:
    with pytest.raises(SystemExit) as exc:
        benchmark.parse_config(["--freeze", "true"])
    assert exc.value.code == 2 and "--freeze true is inductor's freezing" in capsys.readouterr().err
    vla, _ = model_and_inputs
    with pytest.raises(ValueError, match="backend='aot_eager' is not allowed"):
        compile_blocks(vla, backend="aot_eager", freeze=True)
    assert not any("forward" in m.__dict__ for m in compiled_modules(vla))  # refused before any change


def test_frozen_blocks_give_the_eager_block_and_freezing_is_put_back(model_and_inputs) -> None:
    import torch._inductor.config as inductor_config

    vla, inputs = model_and_inputs
    block = vla.vision_backbone.featurizer.blocks[0]
    x = torch.randn(1, 17, block.norm1.normalized_shape[0])
    with torch.no_grad():
        want = block(x)
        before = inductor_config.freezing
        handle = compile_blocks(vla, freeze=True)
        try:
            assert inductor_config.freezing is True
            torch.testing.assert_close(block(x), want, rtol=1e-5, atol=1e-5)  # one block compiled, frozen
        finally:
            handle.remove()
    assert inductor_config.freezing == before and "forward" not in block.__dict__
    torch._dynamo.reset()
