"""Exact savings: the towers stop after the block OpenVLA keeps; outputs bit-identical, undo exact, on the native
model and on OpenVLA's own remote-code model (pins)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from prismatic_tr.bench.vla.exact import measure_exact_savings
from prismatic_tr.models import build_vla
from prismatic_tr.vla.exact import apply_exact_savings, run_last_block


def _inputs(vla: torch.nn.Module) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 700, (1, 12), generator=gen)
    ids[:, 0] = 1
    return {"input_ids": ids, "pixel_values": torch.randn(1, 6, 224, 224, generator=gen)}


def _counting(block: torch.nn.Module) -> tuple[list[int], torch.utils.hooks.RemovableHandle]:
    calls: list[int] = []
    return calls, block.register_forward_hook(lambda *_: calls.append(1))


def test_native_model_stops_early_and_matches_running_every_block() -> None:
    vla = build_vla("tiny", seed=0)
    inp = _inputs(vla)
    tower = vla.vision_backbone.featurizer
    before = tower.__dict__["forward"]
    calls, hook = _counting(tower.blocks[-1])
    try:
        with torch.no_grad():
            early = vla(**inp).logits
            assert calls == []
            with run_last_block(vla):
                full = vla(**inp).logits
            assert len(calls) == 1
    finally:
        hook.remove()
    assert torch.equal(early, full) and tower.__dict__["forward"] is before
    result = measure_exact_savings(vla, inp, "bridge_orig", repeats=1, warmup=0)
    assert result["identical_actions"] and result["all_blocks_ms"] > 0 and result["stop_early_ms"] > 0


def test_openvla_remote_code_model_gets_the_saving_exactly() -> None:
    from helpers.reference_clients import import_openvla_hf
    from helpers.reference_models import build_reference_vla

    vla = build_reference_vla(import_openvla_hf("modeling_prismatic"), import_openvla_hf("configuration_prismatic"))
    inp = _inputs(vla)
    tower = vla.vision_backbone.featurizer
    original = tower.__dict__["forward"]
    with torch.no_grad():
        ref = vla(**inp).logits
        calls, hook = _counting(tower.blocks[-1])
        try:
            with apply_exact_savings(vla):
                saved = vla(**inp).logits
                assert calls == []
        finally:
            hook.remove()
    assert torch.equal(ref, saved) and tower.__dict__["forward"] is original
    assert np.isfinite(ref.numpy()).all()


def test_model_without_towers_is_refused() -> None:
    with pytest.raises(ValueError, match="featurizer"):
        apply_exact_savings(_wrapped_linear())


def _wrapped_linear() -> torch.nn.Module:
    model = torch.nn.Module()
    model.vision_backbone = torch.nn.Linear(1, 1)
    return model


def test_exact_savings_script_times_both_variants_and_checks_the_actions(tmp_path) -> None:
    from helpers.benchmark_scripts import load_benchmark

    script = load_benchmark("exact_savings")
    out = tmp_path / "exact.json"
    result = script.main(["--preset", "tiny", "--dtype", "float32", "--repeats", "1", "--warmup", "0",
                          "--output", str(out)])
    assert result["identical_actions"] is True and result["all_blocks_ms"] > 0 and result["stop_early_ms"] > 0
    assert json.loads(out.read_text())["speedup"] == result["speedup"]
    assert result["dtype"] == "float32" and result["command"].startswith("python benchmarks/exact_savings.py")
    assert {"avx2", "avx512f", "amx_bf16"} <= set(result["machine"]["cpu"]["features"])  # the machine it ran on
    with pytest.raises(SystemExit) as exc:
        script.main(["--preset", "nope"])
    assert exc.value.code == 2
