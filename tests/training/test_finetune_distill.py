"""Self-distillation while fine-tuning under reduction: the KL at action positions, the teacher, the run."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("peft")
pytest.importorskip("tensorflow_datasets")

from helpers.finetune_cfg import make_cfg  # noqa: E402

from prismatic_tr.models import ActionTokenizer  # noqa: E402
from prismatic_tr.training import FinetuneConfig, finetune  # noqa: E402
from prismatic_tr.training.distill import Distillation, action_position_kl  # noqa: E402
from prismatic_tr.training.distributed import init_distributed  # noqa: E402
from prismatic_tr.training.loop import build_loader, distillation_for, optimizer_step, prepare  # noqa: E402
from prismatic_tr.training.model import build_teacher  # noqa: E402
from prismatic_tr.vla import get_token_reduction  # noqa: E402

# a selecting method (not the merging default): on the tiny random model a merged token stands in for its patches
# so closely that the reduced student's KL is ~1e-7, too small to show the cut reaches the loss
VISION = {"site": "vision", "method": "diverse", "depth_fraction": 0.25, "keep_ratio": 0.1}


# --- the divergence -------------------------------------------------------------------------------------

def test_kl_counts_action_positions_only_and_matches_by_hand():
    tok = ActionTokenizer(64, n_bins=16)
    begin = tok.action_token_begin_idx
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(2, 5, 64, generator=g), torch.randn(2, 5, 64, generator=g)
    targets = torch.tensor([[-100, 3, begin + 1, 63, -100], [begin, begin + 2, 5, -100, -100]])
    is_action = (targets >= begin) & (targets < 64)
    by_hand = F.kl_div(F.log_softmax(student[is_action], -1), F.log_softmax(teacher[is_action], -1),
                       log_target=True, reduction="batchmean")
    torch.testing.assert_close(action_position_kl(student, teacher, targets, tok), by_hand)
    # a change at a text position does not count; at an action position it does
    moved = student.clone()
    moved[0, 1] += 5 * torch.randn(64, generator=g)
    torch.testing.assert_close(action_position_kl(moved, teacher, targets, tok), by_hand)
    moved[0, 2] += 5 * torch.randn(64, generator=g)
    assert action_position_kl(moved, teacher, targets, tok) > by_hand + 1e-3
    assert float(action_position_kl(teacher, teacher, targets, tok)) == pytest.approx(0.0, abs=1e-6)
    assert float(action_position_kl(student, teacher, torch.full_like(targets, -100), tok)) == 0.0
    # temperature: softened distributions, scaled by T**2
    soft = F.kl_div(F.log_softmax(student[is_action] / 2, -1), F.log_softmax(teacher[is_action] / 2, -1),
                    log_target=True, reduction="batchmean") * 4
    torch.testing.assert_close(action_position_kl(student, teacher, targets, tok, temperature=2.0), soft)
    with pytest.raises(ValueError, match="same shape"):
        action_position_kl(student[:, :4], teacher, targets, tok)


@pytest.mark.parametrize("kwargs, match", [
    ({"distill_weight": -1.0}, r"distill_weight=-1.0 is not allowed; use a number >= 0"),
    ({"distill_temperature": 0.0}, r"distill_temperature=0.0 is not allowed; use a number > 0"),
])
def test_config_rejects_bad_distillation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FinetuneConfig(**kwargs)


def test_distillation_rejects_bad_weights():
    tok = ActionTokenizer(64, n_bins=16)
    with pytest.raises(ValueError, match="weight=0"):
        Distillation(torch.nn.Linear(1, 1), tok, weight=0)
    with pytest.raises(ValueError, match="temperature=-1"):
        Distillation(torch.nn.Linear(1, 1), tok, temperature=-1)


# --- on the tiny model ------------------------------------------------------------------------------------

def test_teacher_is_the_unreduced_checkpoint_and_the_student_pays_for_the_cut(paths, tmp_path):
    """The teacher is vla_path without reduction, frozen; its KL to an unreduced untrained student is 0, to the
    reduced student > 0; gradients reach the student only."""
    cfg = make_cfg(paths, tmp_path, token_reduction=VISION, distill_weight=2.0)
    assert cfg.exp_id().endswith("+distill-2")
    s = prepare(cfg, init_distributed())
    aux = distillation_for(s)
    teacher = aux.teacher[0]
    assert get_token_reduction(teacher) is None and get_token_reduction(s.vla) is not None
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    assert not any(p is q for p in aux.parameters() for q in teacher.parameters())  # not an optimizer's business
    batch = next(iter(build_loader(cfg, s.plan, s.vla, s.processor, s.info, seed=0)))
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "pixel_values", "labels")}
    out = s.model(**inputs)
    reduced_kl = aux(out, batch)
    assert float(reduced_kl.detach()) > 1e-4
    reduced_kl.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in s.model.parameters() if p.requires_grad)
    assert all(p.grad is None for p in teacher.parameters())
    unreduced_student = build_teacher(cfg, s.info.device, torch.float32)  # the same weights, no reduction
    assert float(aux(unreduced_student(**inputs), batch)) == pytest.approx(0.0, abs=1e-6)


def test_distillation_keeps_the_student_near_the_teacher_and_the_run_logs_it(paths, tmp_path):
    """Same data, same start: after a few steps on one batch, the run with the KL term is closer to the teacher
    than the run on the action loss alone (which moves away from it); a run logs the term as aux_loss."""
    def kl_after(steps: int, distill: bool) -> list[float]:
        torch.manual_seed(0)
        cfg = make_cfg(paths, tmp_path / str(distill), token_reduction=VISION, distill_weight=10.0,
                       learning_rate=5e-3)
        s = prepare(cfg, init_distributed())
        aux = distillation_for(s)
        batch = next(iter(build_loader(cfg, s.plan, s.vla, s.processor, s.info, seed=0)))
        kls = []
        for _ in range(steps):
            metrics = optimizer_step(s.model, itertools.repeat(batch), s.optimizer, 1, s.info.device,
                                     s.action_tokenizer, aux_loss=aux if distill else None)
            with torch.no_grad():
                out = s.model(**{k: batch[k] for k in ("input_ids", "attention_mask", "pixel_values", "labels")})
                kls.append(float(aux(out, batch)) / cfg.distill_weight)
            assert math.isfinite(float(metrics["loss"]))
        return kls

    with_kl, without = kl_after(5, True), kl_after(5, False)
    print(f"KL to the teacher, distilled: {[round(x, 5) for x in with_kl]}; action loss only: "
          f"{[round(x, 5) for x in without]}")
    assert with_kl[-1] < 0.5 * without[-1]
    result = finetune(make_cfg(paths, tmp_path / "run", token_reduction=VISION, distill_weight=1.0, max_steps=2))
    assert [r["step"] for r in result.history] == [1.0, 2.0]
    assert all(math.isfinite(r["aux_loss"]) and r["aux_loss"] >= 0 for r in result.history)
    assert "aux_loss" not in finetune(make_cfg(paths, tmp_path / "plain", max_steps=1)).history[0]
