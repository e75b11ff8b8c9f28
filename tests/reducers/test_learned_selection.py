"""The vision site's learned selection: the diverse cover weighed by a trained scorer. Untrained it picks as
``diverse``; the straight-through gate leaves the forward bit for bit and carries the loss to the scorer; the
scorer lives with the setting (config round trip, no state_dict key), bad scorers are refused before any change."""

from __future__ import annotations

import pytest
import torch
from helpers.calls import run_and_kept
from helpers.tiny_vla import assert_same, make_inputs, snapshot, tiny

from prismatic_tr.models import load_vla
from prismatic_tr.reducers.learned import CoverScorer, check_scorer_values, straight_through_gate
from prismatic_tr.reducers.strategies.diverse import max_min_order
from prismatic_tr.reducers.strategies.saliency import mean_dissimilarity
from prismatic_tr.reducers.tensor_ops import top_indices
from prismatic_tr.vit.shared import tower_width
from prismatic_tr.vla import (
    Setting,
    apply_token_reduction_from_config,
    apply_token_reduction_to_vla,
    attach_token_reduction,
    current_token_reduction,
    get_token_reduction,
    remove_token_reduction,
    token_reduction_parameters,
)

VISION = dict(site="vision", reduction_ratio=0.25, depth_fraction=0.5)  # apply_token_reduction_to_vla's keywords
VISION_SETTING = dict(site="vision", keep_ratio=0.25, depth_fraction=0.5)  # the same as Setting fields


def _scorer_values(width: int, seed: int = 0) -> list[float]:
    return torch.randn(width + 1, generator=torch.Generator().manual_seed(seed)).tolist()


def test_cover_scorer_weighs_the_max_min_cover() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 40, 8, generator=g)
    zero = CoverScorer(8)
    lw = zero.log_weights(x)
    assert torch.equal(top_indices(zero.order(x, 6, lw), 6), top_indices(max_min_order(x, 6), 6))  # = diverse
    values = _scorer_values(8)
    scorer = CoverScorer(8, values)
    assert scorer.values() == pytest.approx(values)
    lw = scorer.log_weights(x)
    by_hand = torch.nn.functional.layer_norm(x, (8,)) @ torch.tensor(values[:8]) + values[8]
    torch.testing.assert_close(lw, by_hand)
    weight = torch.exp(lw - lw.amax(dim=1, keepdim=True))
    want = max_min_order(x, 6, weight=weight, first_key=weight * mean_dissimilarity(x))
    assert torch.equal(scorer.order(x, 6, lw), want)
    assert not torch.equal(top_indices(want, 6), top_indices(max_min_order(x, 6), 6))  # the weights matter
    gate = straight_through_gate(lw)
    assert torch.equal(gate, torch.ones_like(gate))
    gate.sum().backward()
    torch.testing.assert_close(scorer.bias.grad, torch.tensor(80.0))  # d gate / d log-weight = 1


@pytest.mark.parametrize("values, match", [
    ("abc", "list of C \\+ 1 numbers"),
    ([1.0, float("nan")], "finite"),
    ([1.0, True], "finite"),
    ([0.5], "C \\+ 1 >= 2"),
])
def test_bad_scorer_values_are_refused(values, match) -> None:
    with pytest.raises(ValueError, match=match):
        check_scorer_values(values)


def test_untrained_learned_selection_picks_as_diverse() -> None:
    vla = tiny()
    px = make_inputs(vla)["pixel_values"]
    kept = {}
    for method in ("diverse", "learned"):
        apply_token_reduction_to_vla(vla, method, **VISION)
        try:
            with torch.no_grad():
                kept[method] = run_and_kept(vla, lambda: vla.vision_backbone(px))
        finally:
            remove_token_reduction(vla)
    assert torch.equal(kept["diverse"][1], kept["learned"][1]) and torch.equal(kept["diverse"][0], kept["learned"][0])


def test_gate_keeps_the_forward_and_trains_the_scorer() -> None:
    """With gradients on the output is the inference output bit for bit; the loss reaches every scorer
    parameter, which are the site's own (not the model's) and in no state_dict."""
    vla = tiny()
    before = snapshot(vla)
    inp = make_inputs(vla)
    width = tower_width(vla.vision_backbone.featurizer)
    apply_token_reduction_to_vla(vla, "learned", **VISION)
    try:
        apply_token_reduction_to_vla(vla, "learned", **VISION)  # applying again replaces, as for every method
        params = token_reduction_parameters(vla)
        assert [p.shape for p in params] == [torch.Size([width]), torch.Size([])]
        assert not any(p is q for p in params for q in vla.parameters())
        assert set(vla.state_dict()) == set(before[1])
        with torch.no_grad():
            plain = vla(**inp).logits
        trained = vla(**inp).logits
        assert torch.equal(plain, trained)
        trained.float().pow(2).mean().backward()
        assert all(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in params)
    finally:
        remove_token_reduction(vla)
    vla.zero_grad(set_to_none=True)
    assert_same(before, snapshot(vla))


def test_trained_scorer_rides_with_the_setting(tmp_path) -> None:
    """A changed scorer changes the picks; its values reach config.token_reduction (current_token_reduction),
    a saved model reloads and picks the same, and a scorer of the wrong width is refused before any change."""
    vla = tiny()
    inp = make_inputs(vla)
    apply_token_reduction_to_vla(vla, "learned", **VISION)
    handle = get_token_reduction(vla)
    with torch.no_grad():
        untrained = run_and_kept(vla, lambda: vla(**inp).logits)
        handle.scorer.weight.copy_(torch.tensor(_scorer_values(handle.scorer.weight.numel(), seed=1)[:-1]) * 3)
        trained = run_and_kept(vla, lambda: vla(**inp).logits)
    assert not torch.equal(untrained[1], trained[1])
    [now] = current_token_reduction(vla)
    assert now.scorer == pytest.approx(handle.scorer.values()) and vla.config.token_reduction["scorer"] == list(now.scorer)
    vla.save_pretrained(tmp_path)
    remove_token_reduction(vla)
    loaded, _ = load_vla(tmp_path)
    apply_token_reduction_from_config(loaded)
    with torch.no_grad():
        again = run_and_kept(loaded, lambda: loaded(**inp).logits)
    assert torch.equal(again[1], trained[1]) and torch.equal(again[0], trained[0])
    remove_token_reduction(loaded)
    before = snapshot(loaded)
    width = tower_width(loaded.vision_backbone.featurizer)
    wrong = Setting(method="learned", scorer=[0.0] * 5, **VISION_SETTING)
    with pytest.raises(ValueError, match=f"{width} wide, so it needs {width + 1}"):
        attach_token_reduction(loaded, wrong)
    assert_same(before, snapshot(loaded))
    with pytest.raises(ValueError, match="scorer goes with method 'learned'"):
        Setting(method="diverse", scorer=[0.0] * (width + 1), **VISION_SETTING)
    with pytest.raises(ValueError, match="unknown reduction method 'learned'"):
        Setting(method="learned", keep_ratio=0.25)  # projector site: not a reducer


# --- fine-tuning with a learned selection ---------------------------------------------------------------------

@pytest.mark.parametrize("use_lora", [True, False])
def test_finetune_trains_the_scorer_and_the_checkpoint_carries_it(paths, tmp_path, use_lora) -> None:
    """The optimizer trains the scorer with the policy; the checkpoint's config holds it as trained, so
    ``load_vla`` + ``apply_token_reduction_from_config`` gives the trained model's choice and logits; resuming
    puts it back; DDP is refused (its gradients would not be all-reduced)."""
    pytest.importorskip("peft")
    import numpy as np
    from helpers.finetune_cfg import make_cfg

    from prismatic_tr.training.distributed import DistInfo, init_distributed
    from prismatic_tr.training.loop import prepare, run

    setting = {"site": "vision", "method": "learned", "depth_fraction": 0.5, "keep_ratio": 0.25}
    cfg = make_cfg(paths, tmp_path, max_steps=3, save_steps=2, save_latest_checkpoint_only=False, use_lora=use_lora,
                   learning_rate=0.05, token_reduction=setting)
    s = prepare(cfg, init_distributed())
    handle = get_token_reduction(s.vla)
    assert all(any(p is q for g in s.optimizer.param_groups for q in g["params"]) for p in handle.scorer_parameters())
    result = run(s)
    trained = handle.scorer.values()
    assert any(v != 0.0 for v in trained)  # it moved from the diverse-equivalent start
    vla, processor = load_vla(result.last_checkpoint)
    assert vla.config.token_reduction["scorer"] == pytest.approx(trained)
    apply_token_reduction_from_config(vla)
    img = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    inputs = processor("In: What action should the robot take to open the drawer?\nOut:", img)
    s.model.eval()
    with torch.no_grad():
        (want, kept_want), (got, kept_got) = run_and_kept(s.model, lambda: s.model(**inputs)), \
            run_and_kept(vla, lambda: vla(**inputs))
    assert kept_got is not None and torch.equal(kept_got, kept_want)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=1e-5)

    step2 = result.last_checkpoint.parent / "step_000002"
    resumed = prepare(make_cfg(paths, tmp_path, max_steps=3, use_lora=use_lora, resume_from=step2,
                               token_reduction=setting), init_distributed())
    saved = load_vla(step2)[0].config.token_reduction["scorer"]
    assert resumed.start_step == 2 and get_token_reduction(resumed.vla).scorer.values() == pytest.approx(saved)
    with pytest.raises(ValueError, match="run it in one process"):
        prepare(cfg, DistInfo(rank=0, world_size=2, local_rank=0, device=torch.device("cpu")))


def test_eval_policy_evaluates_the_setting_a_checkpoint_carries(tmp_path) -> None:
    """``--settings own``: the checkpoint's stored setting, its trained scorer included; refused without one."""
    from prismatic_tr.policy.closed_loop_eval import EvalPolicyConfig

    vla = tiny()
    apply_token_reduction_to_vla(vla, "learned", **VISION)
    values = _scorer_values(tower_width(vla.vision_backbone.featurizer), seed=2)
    try:
        handle = get_token_reduction(vla)
        with torch.no_grad():
            handle.scorer.weight.copy_(torch.tensor(values[:-1]))
            handle.scorer.bias.fill_(values[-1])
        current_token_reduction(vla)
        vla.save_pretrained(tmp_path / "ckpt")
    finally:
        remove_token_reduction(vla)
    cfg = EvalPolicyConfig(vla_path=str(tmp_path / "ckpt"), methods=[], settings=["own"], episodes=1)
    own = cfg.setting_list[-1]
    assert own.label == "vision:learned:0.25@0.5" and own.scorer == pytest.approx(tuple(values))
    [reduction] = own.reductions()
    assert reduction.scorer == pytest.approx(values)
    vla.save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match="--settings own: --vla_path .* no token reduction is stored"):
        EvalPolicyConfig(vla_path=str(tmp_path / "plain"), methods=[], settings=["own"], episodes=1)
    with pytest.raises(ValueError, match="needs --vla_path"):
        EvalPolicyConfig(methods=[], settings=["own"], episodes=1)


# --- precision: the scorer and the cover run in float32 under autocast ---------------------------------------------

@pytest.mark.parametrize("input_dtype", [torch.float32, torch.bfloat16])
def test_scorer_computes_in_float32_under_autocast(input_dtype) -> None:
    """Under CPU bfloat16 autocast (which does run a plain matmul in bfloat16 here) the log-weights come out
    float32 and equal to those without autocast, and the kept indices are the same: training under autocast picks
    what inference picks."""
    g = torch.Generator().manual_seed(3)
    width, k = 48, 16
    x = (torch.randn(2, 120, width, generator=g) * 3).to(input_dtype)
    scorer = CoverScorer(width, _scorer_values(width, seed=4))
    plain_lw = scorer.log_weights(x)
    plain_kept = top_indices(scorer.order(x, k, plain_lw), k)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (x.float() @ scorer.weight).dtype == torch.bfloat16  # autocast is on for a bare matmul
        lw = scorer.log_weights(x)
        scores = scorer.order(x, k, lw)
        gate = straight_through_gate(lw.gather(1, top_indices(scores, k)))
    assert lw.dtype == torch.float32 and scores.dtype == torch.float32 and gate.dtype == torch.float32
    assert torch.equal(lw, plain_lw)
    assert torch.equal(top_indices(scores, k), plain_kept)


# --- a fine-tune from a checkpoint that carries a learned scorer keeps it ----------------------------------------

def _checkpoint_with_scorer(vla_dir, dest, depth_fraction: float = 0.5) -> list[float]:
    """``vla_dir`` copied to ``dest`` with a trained-looking learned setting in its config.json; its scorer."""
    import json
    import shutil

    shutil.copytree(vla_dir, dest)
    width = tower_width(load_vla(vla_dir)[0].vision_backbone.featurizer)
    values = [float(v) for v in torch.tensor(_scorer_values(width, seed=5))]  # float32-exact
    config = json.loads((dest / "config.json").read_text())
    config["token_reduction"] = Setting(method="learned", site="vision", keep_ratio=0.25,
                                                       depth_fraction=depth_fraction, scorer=values).to_dict()
    (dest / "config.json").write_text(json.dumps(config))
    return values


def test_finetune_from_a_learned_checkpoint_keeps_its_scorer(paths, tmp_path) -> None:
    """``vla_path`` carrying a learned scorer + ``--token_reduction.method learned`` at its depth: training starts
    from the saved scorer (equal to the saved values), the optimizer holds it and trains it on; at another depth
    the fine-tune is refused before anything trains."""
    pytest.importorskip("peft")
    from helpers.finetune_cfg import make_cfg

    from prismatic_tr.training.distributed import init_distributed
    from prismatic_tr.training.loop import prepare, run

    _, vla_dir = paths
    saved = _checkpoint_with_scorer(vla_dir, tmp_path / "learned_ckpt")
    setting = {"site": "vision", "method": "learned", "depth_fraction": 0.5, "keep_ratio": 0.1}
    cfg = make_cfg(paths, tmp_path, vla_path=str(tmp_path / "learned_ckpt"), max_steps=1, learning_rate=0.05,
                   token_reduction=setting)
    s = prepare(cfg, init_distributed())
    handle = get_token_reduction(s.vla)
    assert handle.scorer.values() == saved and handle.settings.keep_ratio == 0.1
    assert all(any(p is q for g in s.optimizer.param_groups for q in g["params"]) for p in handle.scorer_parameters())
    result = run(s)
    trained = load_vla(result.last_checkpoint)[0].config.token_reduction["scorer"]
    assert trained != saved and trained == pytest.approx(saved, abs=0.2)  # trained on from the saved values
    other = make_cfg(paths, tmp_path, vla_path=str(tmp_path / "learned_ckpt"), max_steps=1,
                     token_reduction={**setting, "depth_fraction": 0.25})
    with pytest.raises(ValueError, match="learned scorer was trained at site='vision' depth_fraction=0.5"):
        prepare(other, init_distributed())
