"""benchmarks/metaworld_merge_groups.py (issue 48's experiment) and its group makers
(``prismatic_tr/reducers/merge_groups.py``): each way of making `diverse_merge`'s groups does
what it says on small tensors, runs at both sites of a two-camera OpenVLA-OFT model with sizes that still add up to
each image's patches, ``mean`` is `diverse_merge` itself, ``representative`` is `diverse`'s tokens, and the
patched modules are put back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.benchmark_scripts import load_benchmark
from helpers.tiny_vla import make_inputs

import prismatic_tr.reducers.merge_groups as groups_module
import prismatic_tr.reducers.strategies.diverse_merge as diverse_merge
import prismatic_tr.vit.shared as shared
from prismatic_tr.models import build_vla
from prismatic_tr.policy.job_journal import JobJournal
from prismatic_tr.policy.metaworld_eval import JOURNAL, EvalMetaWorldConfig
from prismatic_tr.vla import apply_token_reduction_spec, get_token_reduction, remove_token_reduction
from prismatic_tr.vla.scope import reduction_call

script = load_benchmark("metaworld_merge_groups")


def test_group_makers_on_small_tensors() -> None:
    patches = torch.randn(2, 16, 8, generator=torch.Generator().manual_seed(0))
    idx = torch.tensor([[0, 5, 10, 15], [1, 2, 8, 12]])
    owner = diverse_merge.nearest_owner(patches, idx)
    rep, sizes = groups_module.weighted_means(patches, owner, idx, "representative")
    assert torch.equal(rep, torch.gather(patches, 1, idx[..., None].expand(-1, -1, 8)))
    assert torch.equal(sizes.sum(dim=1), torch.full((2,), 16.0))
    anchor, _ = groups_module.weighted_means(patches, owner, idx, "anchor")
    for g in range(4):  # half the representative, half the mean of the rest (the representative alone: itself)
        members = (owner[0] == g).nonzero().flatten()
        others = members[members != idx[0, g]]
        want = patches[0, idx[0, g]] if len(others) == 0 else 0.5 * patches[0, idx[0, g]] + 0.5 * patches[0, others].mean(0)
        torch.testing.assert_close(anchor[0, g], want)
    assert torch.equal(groups_module.local_owner(patches, idx, 0.0), owner)  # no locality: the nearest by similarity
    far = groups_module.local_owner(patches, idx, 100.0)                     # all locality: the nearest on the grid
    cells = torch.stack(torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij"), -1).reshape(16, 2).float()
    dist = torch.cdist(cells, cells[idx[0]])                          # (ties on the grid go by similarity)
    assert torch.equal(dist.gather(1, far[0][:, None])[:, 0], dist.min(-1).values)
    refined = groups_module.lloyd_owner(patches, owner, idx)
    assert torch.equal(refined.gather(1, idx), torch.arange(4).expand(2, -1))
    x = torch.nn.functional.normalize(patches[1], dim=-1)                 # by hand: to the nearest group mean
    means = torch.nn.functional.normalize(torch.stack([x[owner[1] == g].mean(0) for g in range(4)]), dim=-1)
    by_hand = (x @ means.T).argmax(-1)
    by_hand[idx[1]] = torch.arange(4)
    assert torch.equal(refined[1], by_hand)
    with pytest.raises(ValueError, match="square patch grid"):
        groups_module.local_owner(patches[:, :15], idx, 1.0)
    with pytest.raises(ValueError, match="groups='median' is not allowed"):
        with script.merge_groups("median"):
            pass


def slots(vla: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad(), reduction_call(vla) as call:
        out = vla.predict_action(**inputs, unnorm_key="bridge_orig", proprio=torch.zeros(2, 8))[1]
    return out, call.sizes


@pytest.mark.parametrize("spec", ["diverse_merge:0.25", "vision:diverse_merge:0.25@0.25"])
def test_every_way_runs_at_both_sites_and_is_put_back(spec: str) -> None:
    vla = build_vla("tiny-oft")
    inputs = make_inputs(vla)
    inputs["pixel_values"] = torch.cat([inputs["pixel_values"]] * 2, dim=1)  # two images
    saved = diverse_merge.nearest_owner, diverse_merge.group_means, shared.nearest_owner, shared.group_means
    apply_token_reduction_spec(vla, spec)
    try:
        own = slots(vla, inputs)
        outs = {}
        for groups in script.GROUPS:
            with script.merge_groups(groups, locality=1.0):
                outs[groups], sizes = slots(vla, inputs)
            assert torch.equal(sizes.reshape(2, 2, -1).sum(dim=2), torch.full((2, 2), 256.0))
            assert (diverse_merge.nearest_owner, diverse_merge.group_means, shared.nearest_owner,
                    shared.group_means) == saved
        assert torch.equal(outs["mean"], own[0])
        for groups in ("anchor", "representative"):  # (lloyd and local may leave these groups as they are)
            assert not torch.equal(outs[groups], own[0]), groups
    finally:
        remove_token_reduction(vla)


def test_representative_hands_diverse_tokens_to_the_language_model() -> None:
    """At the projector site, with the language model's weighting taken off, ``representative`` is `diverse`."""
    vla = build_vla("tiny-oft")
    inputs = make_inputs(vla)
    inputs["pixel_values"] = torch.cat([inputs["pixel_values"]] * 2, dim=1)
    handle = get_token_reduction(apply_token_reduction_spec(vla, "diverse_merge:0.25"))
    try:
        handle.proportional.remove()
        handle.proportional = None
        with script.merge_groups("representative"):
            merged = slots(vla, inputs)[0]
    finally:
        remove_token_reduction(vla)
    apply_token_reduction_spec(vla, "diverse:0.25")
    try:
        chosen = slots(vla, inputs)[0]
    finally:
        remove_token_reduction(vla)
    torch.testing.assert_close(merged, chosen, rtol=0, atol=1e-6)


def test_a_folder_of_another_way_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The way is in the journal's identity: a folder another way journaled is refused (exit 2), as is more than
    one worker (spawned processes would run the model unpatched); nothing is written."""
    cfg = EvalMetaWorldConfig(split="validation", output_dir=tmp_path)
    JobJournal(tmp_path / JOURNAL, cfg.journal_identity({"merge_groups": "anchor"}))
    before = sorted(tmp_path.iterdir())
    for groups, workers, needle in (("representative", 1, "patch: {'merge_groups': 'anchor'} there, "
                                                          "{'merge_groups': 'representative'} here"),
                                    ("mean", 1, "patch: {'merge_groups': 'anchor'} there, None here"),
                                    ("anchor", 2, "--workers 2 is not allowed with {'merge_groups': 'anchor'}")):
        with pytest.raises(SystemExit) as exit_info:
            script.main(["--groups", groups, "--", "--output_dir", str(tmp_path), "--split", "validation",
                         "--workers", str(workers)])
        assert exit_info.value.code == 2
        assert needle in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == before
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--groups", "local", "--locality", "-1", "--", "--output_dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "--locality -1.0: give a number >= 0" in capsys.readouterr().err
