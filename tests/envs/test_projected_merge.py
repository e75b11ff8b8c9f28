"""benchmarks/metaworld_projected_merge.py (issue 48's experiment): with ``--after_projector`` the projector-site
`diverse_merge` hands the language model the mean of each group's projected tokens (the cover and groups unchanged,
the sizes unchanged), leaves the vision site and unreduced calls alone, puts the patched modules back, and refuses
a folder journaled without it, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.benchmark_scripts import load_benchmark
from helpers.tiny_vla import make_inputs

import prismatic_tr.reducers.strategies.diverse_merge as diverse_merge
from prismatic_tr.models import build_vla
from prismatic_tr.models.vision import NativeProjector
from prismatic_tr.policy.job_journal import JobJournal
from prismatic_tr.policy.metaworld_eval import JOURNAL, EvalMetaWorldConfig
from prismatic_tr.reducers.strategies.diverse import max_min_order
from prismatic_tr.reducers.tensor_ops import group_means, top_indices
from prismatic_tr.vla import apply_token_reduction_spec, remove_token_reduction
from prismatic_tr.vla.scope import reduction_call

script = load_benchmark("metaworld_projected_merge")


def two_camera_model() -> tuple[torch.nn.Module, torch.Tensor]:
    vla = build_vla("tiny-oft")
    vla.eval()
    return vla, torch.cat([make_inputs(vla)["pixel_values"]] * 2, dim=1)


def test_each_kept_token_is_the_mean_of_its_groups_projected_tokens() -> None:
    vla, px = two_camera_model()
    saved = diverse_merge.merge_into, NativeProjector.forward
    with torch.no_grad():
        feats = vla.vision_backbone(px)                                  # (1, 2 * P, D), unreduced
        full = vla.projector(feats)
        apply_token_reduction_spec(vla, "diverse_merge:0.25")
        try:
            with reduction_call(vla):
                before = vla.embed_images(px)
            with script.projected_merge(), reduction_call(vla):
                after = vla.embed_images(px)
        finally:
            remove_token_reduction(vla)
        with script.projected_merge():
            unreduced = vla.embed_images(px)                             # nothing to merge: the plain projector
    assert (diverse_merge.merge_into, NativeProjector.forward) == saved
    torch.testing.assert_close(unreduced, full, rtol=0, atol=0)
    b, n = px.shape[0], 2
    per_image = feats.reshape(b * n, feats.shape[1] // n, -1)
    k = after.shape[1] // n
    idx = top_indices(max_min_order(per_image, k), k)
    owner = diverse_merge.nearest_owner(per_image, idx)
    want, _ = group_means(full.reshape(b * n, -1, full.shape[-1]), owner, k)
    torch.testing.assert_close(after, want.reshape(b, n * k, -1), rtol=1e-5, atol=1e-5)
    plain, _ = group_means(per_image, owner, k)                          # the shipped way: the mean's projection
    torch.testing.assert_close(before, vla.projector(plain).reshape(b, n * k, -1), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before, after, atol=1e-4)


def test_the_vision_site_is_not_touched() -> None:
    vla, px = two_camera_model()
    apply_token_reduction_spec(vla, "vision:diverse_merge:0.25@0.25")
    try:
        with torch.no_grad(), reduction_call(vla):
            own = vla.embed_images(px)
        with torch.no_grad(), script.projected_merge(), reduction_call(vla):
            patched = vla.embed_images(px)
    finally:
        remove_token_reduction(vla)
    assert torch.equal(own, patched)


def test_a_folder_journaled_without_the_patch_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = EvalMetaWorldConfig(split="validation", output_dir=tmp_path)
    JobJournal(tmp_path / JOURNAL, cfg.journal_identity(None))
    before = sorted(tmp_path.iterdir())
    for workers, needle in ((1, "patch: None there, {'merge_after_projector': True} here"),
                            (2, "--workers 2 is not allowed with {'merge_after_projector': True}")):
        with pytest.raises(SystemExit) as exit_info:
            script.main(["--after_projector", "--", "--output_dir", str(tmp_path), "--split", "validation",
                         "--workers", str(workers)])
        assert exit_info.value.code == 2
        assert needle in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == before


def test_a_merge_that_never_reached_the_projector_is_not_applied_later() -> None:
    """A backbone call alone (as the recall measurement makes) leaves its groups behind; the next, unreduced,
    projector call runs as it is and clears them."""
    vla, px = two_camera_model()
    with torch.no_grad():
        full = vla.projector(vla.vision_backbone(px))
        with script.projected_merge():
            apply_token_reduction_spec(vla, "diverse_merge:0.25")
            try:
                with reduction_call(vla):
                    vla.vision_backbone(px)                              # merged, never projected
            finally:
                remove_token_reduction(vla)
            after = vla.embed_images(px)
    torch.testing.assert_close(after, full, rtol=0, atol=0)
