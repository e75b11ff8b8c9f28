"""benchmarks/metaworld_action_gap.py and :mod:`prismatic_tr.bench.vla.action_gap`: the chunk gap of a reduction on
the same batches is zero for the unreduced policy and the same as comparing the chunks by hand, the model is left as
it was, and the command refuses bad flags before any work (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.benchmark_scripts import load_benchmark

from prismatic_tr.bench.vla.action_gap import action_gaps
from prismatic_tr.models import build_vla
from prismatic_tr.vla import apply_token_reduction_spec, get_token_reduction, remove_token_reduction
from prismatic_tr.vla.spec import parse_setting

script = load_benchmark("metaworld_action_gap")


def oft_batch(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (2, 9), generator=g)
    ids[:, 0] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "proprio": torch.rand(2, 8, generator=g),
            "pixel_values": torch.randn(2, 12, 224, 224, generator=g), "actions": torch.rand(2, 8, 7, generator=g)}


def test_the_gap_is_the_chunks_difference_and_the_model_is_left_as_it_was() -> None:
    vla = build_vla("tiny-oft").eval()
    batches = [oft_batch(0), oft_batch(1)]
    specs = ["vision:diverse_merge:0.25@0.25", "vision:diverse_merge_keys:0.25@0.25"]
    gaps = action_gaps(vla, batches, [parse_setting(s) for s in specs])
    assert list(gaps) == ["none", *specs]
    assert gaps["none"]["l1_to_unreduced"] == 0.0 and gaps["none"]["states"] == 4
    with torch.no_grad():
        base = torch.cat([vla.predict_chunk(b) for b in batches])
        apply_token_reduction_spec(vla, specs[1])
        try:
            reduced = torch.cat([vla.predict_chunk(b) for b in batches])
        finally:
            remove_token_reduction(vla)
    assert gaps[specs[1]]["l1_to_unreduced"] == pytest.approx((reduced - base).abs().mean().item(), rel=1e-5)
    assert gaps[specs[1]]["l1_to_unreduced"] > 0
    label = torch.cat([b["actions"] for b in batches])
    assert gaps["none"]["l1_to_label"] == pytest.approx((base - label).abs().mean().item(), rel=1e-5)
    assert get_token_reduction(vla) is None


def test_the_gap_per_group_is_each_groups_own_mean() -> None:
    """``groups`` (one name per state) adds each group's mean gap; the states' count-weighted mean of the groups is
    the overall gap, the unreduced policy's is 0 in every group, and a wrong length is refused."""
    vla = build_vla("tiny-oft").eval()
    batches = [oft_batch(0), oft_batch(1)]
    spec = "vision:diverse_merge:0.25@0.25"
    groups = ["reach", "push", "reach", "reach"]
    gaps = action_gaps(vla, batches, [parse_setting(spec)], groups=groups)
    assert list(gaps[spec]["by_group"]) == ["reach", "push"]
    assert [g["states"] for g in gaps[spec]["by_group"].values()] == [3, 1]
    assert all(g["l1_to_unreduced"] == 0.0 for g in gaps["none"]["by_group"].values())
    pooled = sum(g["l1_to_unreduced"] * g["states"] for g in gaps[spec]["by_group"].values()) / 4
    assert pooled == pytest.approx(gaps[spec]["l1_to_unreduced"], rel=1e-5)
    with torch.no_grad():
        base = vla.predict_chunk(batches[0])
        apply_token_reduction_spec(vla, spec)
        try:
            reduced = vla.predict_chunk(batches[0])
        finally:
            remove_token_reduction(vla)
    push = (reduced[1] - base[1]).abs().mean().item()  # the second state of the first batch
    assert gaps[spec]["by_group"]["push"]["l1_to_unreduced"] == pytest.approx(push, rel=1e-5)
    with pytest.raises(ValueError, match="groups names 3 states; the batches hold 4"):
        action_gaps(vla, batches, [], groups=groups[:3])


@pytest.mark.parametrize(("flags", "message"), [
    (["--driver", "none"], "does not reduce"),
    (["--driver", "diverse:0.25", "--states", "0"], "--states 0"),
    (["--driver", "diverse:0.25", "--settings", "diverse:2"], "keep"),
    (["--driver", "diverse:0.25", "--vla_path", "nowhere"], "not a checkpoint directory"),
])
def test_bad_flags_exit_2_before_any_work(flags: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--data_root", str(tmp_path / "data"), "--settings", "diverse:0.5", "--output", str(tmp_path / "out.json"),
            *flags]
    with pytest.raises(SystemExit) as exit_info:
        script.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "data").exists() and not (tmp_path / "out.json").exists()
