"""benchmarks/metaworld_pair_merge.py (issue 48's experiment) and its groups (``prismatic_tr/reducers/pair_merge.py``):
the rounds go from N to K merging at most half of set A each, the most alike pairs merge first and a patch like
no other is left alone, one round equals the matching done by hand, no host sync; at the projector site of a
two-camera OpenVLA-OFT model the groups' sizes add up to each image's patches, an unreduced call is untouched, the
registry is put back; bad settings and a plain run's folder are refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.benchmark_scripts import load_benchmark
from helpers.tiny_vla import make_inputs

from prismatic_tr.bench.measure.ops import find_host_syncs
from prismatic_tr.models import build_vla
from prismatic_tr.policy.job_journal import JobJournal
from prismatic_tr.policy.metaworld_eval import JOURNAL, EvalMetaWorldConfig
from prismatic_tr.reducers.registry import get_strategy, register_strategy, selection_methods
from prismatic_tr.reducers.strategies.pair_merge import pair_owner, pair_rounds
from prismatic_tr.reducers.tensor_ops import group_means
from prismatic_tr.vla import apply_token_reduction_spec, remove_token_reduction
from prismatic_tr.vla.scope import reduction_call

script = load_benchmark("metaworld_pair_merge")


def pair_merge(patches: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The strategy's tokens, representatives and sizes for ``k`` kept."""
    idx, owner = pair_owner(patches, k)
    tokens, sizes = group_means(patches, owner, k)
    return tokens, idx, sizes


def test_rounds_go_from_n_to_k_merging_at_most_half_of_a() -> None:
    assert pair_rounds(256, 128) == [64, 48, 16]
    assert pair_rounds(5, 5) == []
    for n, k in ((256, 26), (7, 1), (3, 2)):
        current = n
        for r in pair_rounds(n, k):
            assert 1 <= r <= max(1, (current + 1) // 2 // 2)
            current -= r
        assert current == k
    for n, k in ((4, 0), (4, 5)):
        with pytest.raises(ValueError, match=f"keeps k={k} of n={n} tokens"):
            pair_rounds(n, k)


def test_alike_pairs_merge_and_a_patch_like_no_other_stays_alone() -> None:
    g = torch.Generator().manual_seed(0)
    twins = torch.randn(2, 8, 16, generator=g).repeat_interleave(2, dim=1)       # (2, 16, 16): patches 2i, 2i + 1 alike
    tokens, idx, sizes = pair_merge(twins, 8)
    torch.testing.assert_close(tokens, twins[:, 0::2])
    assert torch.equal(sizes, torch.full((2, 8), 2.0))
    assert torch.equal(idx // 2, torch.arange(8).expand(2, -1))                   # each pair at one of its patches
    background = torch.randn(1, 1, 16, generator=g) + 0.01 * torch.randn(1, 15, 16, generator=g)
    odd = torch.cat([background[:, :6], -background[:, :1], background[:, 6:]], dim=1)   # patch 6 unlike the rest
    idx, owner = pair_owner(odd, 4)
    assert 6 in idx[0].tolist() and int((owner[0] == owner[0, 6]).sum()) == 1
    assert torch.equal(owner.gather(1, idx), torch.arange(4)[None])               # each representative its own
    tokens, _, sizes = pair_merge(odd, 4)
    assert float(sizes.sum()) == 16.0 and torch.all(idx[:, 1:] > idx[:, :-1])
    torch.testing.assert_close(tokens[0, idx[0].tolist().index(6)], odd[0, 6])


def test_one_round_is_the_matching_done_by_hand() -> None:
    patches = torch.randn(1, 6, 5, generator=torch.Generator().manual_seed(3))
    idx, owner = pair_owner(patches, 5)                                           # one round, r = 1
    x = torch.nn.functional.normalize(patches[0], dim=-1)
    sim = x[0::2] @ x[1::2].T                                                     # A: 0, 2, 4; B: 1, 3, 5
    a = int(sim.max(dim=1).values.argmax())
    b = int(sim[a].argmax())
    survivors = [s for s in range(6) if s != 2 * a]
    assert idx[0].tolist() == survivors
    want = [survivors.index(2 * b + 1) if s == 2 * a else survivors.index(s) for s in range(6)]
    assert owner[0].tolist() == want
    assert find_host_syncs(lambda: pair_merge(patches, 2)) == {}


def call(vla: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    with torch.no_grad(), reduction_call(vla) as record:
        out = vla.predict_action(**inputs, unnorm_key="bridge_orig", proprio=torch.zeros(2, 8))[1]
    return out, record.sizes


def two_cameras() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    vla = build_vla("tiny-oft")
    inputs = make_inputs(vla)
    inputs["pixel_values"] = torch.cat([inputs["pixel_values"]] * 2, dim=1)     # two images
    return vla, inputs


def under(vla: torch.nn.Module, inputs: dict[str, torch.Tensor], spec: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    apply_token_reduction_spec(vla, spec)
    try:
        return call(vla, inputs)
    finally:
        remove_token_reduction(vla)


def test_the_experiment_is_pair_merge_at_the_projector_site_and_is_put_back() -> None:
    """The script's patched ``diverse_merge:0.5`` is the plain ``pair_merge:0.5`` (so its runs are that setting's), an
    unreduced call is untouched, and the registry entry is put back."""
    vla, inputs = two_cameras()
    saved = get_strategy("diverse_merge")
    unreduced = call(vla, inputs)[0]
    own = under(vla, inputs, "diverse_merge:0.5")[0]
    plain, plain_sizes = under(vla, inputs, "pair_merge:0.5")
    with script.pair_groups():                       # as a run does: the settings applied inside the block
        assert get_strategy("diverse_merge").reduce is get_strategy("pair_merge").reduce
        torch.testing.assert_close(call(vla, inputs)[0], unreduced, rtol=0, atol=0)
        paired, sizes = under(vla, inputs, "diverse_merge:0.5")
    assert get_strategy("diverse_merge") is saved
    assert sizes is not None and torch.equal(sizes.reshape(2, 2, -1).sum(dim=2), torch.full((2, 2), 256.0))
    assert sizes.shape[-1] == 2 * 128 and not torch.equal(paired, own)
    torch.testing.assert_close(paired, plain, rtol=0, atol=0)
    assert plain_sizes is not None and torch.equal(sizes, plain_sizes)


def test_pair_merge_runs_at_the_vision_site_with_its_own_groups() -> None:
    """``vision:pair_merge``: the towers' later blocks and the language model get K tokens whose sizes add up to each
    image's patches, the groups are the strategy's on the scoring tower's tokens (not a cover's), removal is exact."""
    assert "pair_merge" in selection_methods()
    vla, inputs = two_cameras()
    state = {k: v.clone() for k, v in vla.state_dict().items()}
    unreduced = call(vla, inputs)[0]
    cover = under(vla, inputs, "vision:diverse_merge:0.5@0.25")[0]
    paired, sizes = under(vla, inputs, "vision:pair_merge:0.5@0.25")
    assert sizes is not None and torch.equal(sizes.reshape(2, 2, -1).sum(dim=2), torch.full((2, 2), 256.0))
    assert not torch.equal(paired, cover) and not torch.equal(paired, unreduced)
    torch.testing.assert_close(call(vla, inputs)[0], unreduced, rtol=0, atol=0)
    assert all(torch.equal(v, state[k]) for k, v in vla.state_dict().items())


def test_groups_go_with_a_merging_strategy_without_a_score_only() -> None:
    def groups(patches: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise AssertionError("not called")

    for kwargs in ({"merges": False}, {"merges": True, "score": lambda p, c, r: p[..., 0]}):
        with pytest.raises(ValueError, match="groups is for a merging strategy without a score"):
            register_strategy("never_registered", count=lambda n, c: n, groups=groups, **kwargs)


def exit_code(argv: list[str]) -> int | str | None:
    try:
        return script.main(argv)
    except SystemExit as stop:
        return stop.code


def test_bad_settings_and_a_plain_runs_folder_are_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = EvalMetaWorldConfig(split="validation", output_dir=tmp_path)
    JobJournal(tmp_path / JOURNAL, cfg.journal_identity(None))
    before = sorted(tmp_path.iterdir())
    for settings, workers, needle in (
            ("[none,vision:diverse_merge:0.5@0.25]", 1, "--settings 'vision:diverse_merge:0.5@0.25': this experiment "
                                                        "patches the projector site's diverse_merge only"),
            ("[none,diverse:0.5]", 1, "allowed: none and diverse_merge:<keep>"),
            ("[none,diverse_merge:0.5]", 1, "patch: None there, {'pair_merge': True} here"),
            ("[none,diverse_merge:0.5]", 2, "--workers 2 is not allowed with {'pair_merge': True}")):
        assert exit_code(["--", "--output_dir", str(tmp_path), "--split", "validation", "--settings", settings,
                          "--workers", str(workers)]) == 2
        assert needle in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == before
    assert exit_code(["--extra", "--"]) == 2
    assert "unrecognized arguments before --: --extra" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["pair_merge:0.5", "vision:pair_merge:0.25@0.25"])
def test_pair_merge_runs_on_openvla_and_comes_off_exactly(spec: str) -> None:
    """On a native OpenVLA (the fused DINOv2 + SigLIP backbone, actions decoded token by token) at both sites: fewer
    visual tokens reach the language model, the generated tokens' logits change, and removal restores the model."""
    from prismatic_tr.vla import visual_token_count

    vla = build_vla("tiny", seed=0)
    inputs = make_inputs(vla)
    state = {k: v.clone() for k, v in vla.state_dict().items()}

    def logits() -> torch.Tensor:
        with torch.no_grad():
            return vla.generate(inputs["input_ids"], inputs["pixel_values"], max_new_tokens=3,
                                return_logits=True).logits

    before, tokens = logits(), visual_token_count(vla)
    apply_token_reduction_spec(vla, spec)
    try:
        assert visual_token_count(vla) < tokens
        assert not torch.equal(logits(), before)
    finally:
        remove_token_reduction(vla)
    torch.testing.assert_close(logits(), before, rtol=0, atol=0)
    assert all(torch.equal(v, state[k]) for k, v in vla.state_dict().items())
