"""``vla_scripts/finetune.py`` on OpenVLA-OFT-style policies (``prismatic_tr.training.oft``) at toy size: the L1 loss
on the chunk through the inference pass with a reduction attached, LoRA (heads trained whole) or full, distillation
on the unreduced teacher's chunk, checkpoints in OFT's layout that reload as the trained policy, resume, adapters,
and bad input. Nothing here times anything."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("tensorflow_datasets")

from helpers.oft_fixtures import write_oft_demos, write_tiny_base, write_tiny_oft  # noqa: E402

from prismatic_tr.models import load_vla  # noqa: E402
from prismatic_tr.models.family import family_of  # noqa: E402
from prismatic_tr.models.oft import predict_chunk  # noqa: E402
from prismatic_tr.policy import adapters  # noqa: E402
from prismatic_tr.policy.oft_recipe import DATASET  # noqa: E402
from prismatic_tr.training import FinetuneConfig, finetune  # noqa: E402
from prismatic_tr.training.distributed import init_distributed  # noqa: E402
from prismatic_tr.training.loop import distillation_for, prepare, run, task_for  # noqa: E402
from prismatic_tr.training.oft import ChunkDistillation, OFTTask, chunk_metrics  # noqa: E402
from prismatic_tr.training.step import accumulated_step  # noqa: E402
from prismatic_tr.vla import apply_token_reduction_from_config, get_token_reduction  # noqa: E402
from vla_scripts.finetune import main  # noqa: E402

VISION = {"site": "vision", "depth_fraction": 0.25, "keep_ratio": 0.25}


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(demonstrations with both cameras, the OpenVLA-style base, the OFT policy made from it), written once."""
    made = write_oft_demos(tmp_path_factory.mktemp("oft_demos"))
    plain = write_tiny_base(tmp_path_factory.mktemp("oft_base"))
    return made, plain, write_tiny_oft(made, plain, tmp_path_factory.mktemp("tiny_oft"))


demos = pytest.fixture(scope="module", name="demos")(lambda artefacts: artefacts[0])
base = pytest.fixture(scope="module", name="base")(lambda artefacts: artefacts[1])
tiny_oft = pytest.fixture(scope="module", name="tiny_oft")(lambda artefacts: artefacts[2])


def oft_cfg(demos_dir: Path, vla_dir: Path, tmp_path: Path, **kw) -> FinetuneConfig:
    args = dict(vla_path=str(vla_dir), data_root_dir=demos_dir, dataset_name=DATASET, run_root_dir=tmp_path / "runs",
                batch_size=2, max_steps=2, save_steps=100, lora_rank=4, shuffle_buffer_size=8, learning_rate=5e-3,
                log_every=1, progress_bar=False)
    args.update(kw)
    return FinetuneConfig(**args)


def first_batch(session) -> dict[str, torch.Tensor]:
    return next(iter(session.task.loader(session, seed=0)))


def chunk_of(vla: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return predict_chunk(vla.eval(), batch)


def test_oft_checkpoints_are_recognised(tiny_oft: Path, base: Path) -> None:
    assert [family_of(p).name for p in (tiny_oft, base, "openvla/openvla-7b")] == ["openvla-oft", "openvla", "openvla"]
    assert isinstance(task_for(str(tiny_oft)), OFTTask) and not isinstance(task_for(str(base)), OFTTask)


@pytest.mark.parametrize("use_lora", [True, False])
def test_loss_falls_on_a_repeated_batch_under_the_vision_site(demos: Path, tiny_oft: Path, tmp_path: Path,
                                                              use_lora: bool) -> None:
    # a step small enough that AdamW's first moves (every weight of the random model at once) do not overshoot
    s = prepare(oft_cfg(demos, tiny_oft, tmp_path, use_lora=use_lora, token_reduction=VISION, learning_rate=5e-4),
                init_distributed())
    assert isinstance(s.task, OFTTask) and s.action_tokenizer is None
    assert get_token_reduction(s.vla).settings.site == "vision"
    trainable = {n for n, p in s.vla.named_parameters() if p.requires_grad}
    assert any(n.startswith("action_head.") for n in trainable) and any(n.startswith("proprio_projector.")
                                                                       for n in trainable)
    if use_lora:  # LoRA on the towers, projector and Llama only; their own weights frozen; the heads whole
        assert all("lora_" in n for n in trainable if not n.startswith(("action_head.", "proprio_projector.")))
        assert any(n.startswith("vision_backbone.") for n in trainable)
    batch = first_batch(s)
    assert batch["actions"].shape == (2, 8, 7) and batch["pixel_values"].shape[1] == 2 * 6  # two cameras, 6 channels each (two towers)
    forward = lambda b: chunk_metrics(s.model, b, s.info.device, False)  # noqa: E731
    losses = [float(accumulated_step(s.model, itertools.repeat(batch), s.optimizer, 1, forward)["loss"])
              for _ in range(6)]
    print(f"repeated-batch L1 (lora={use_lora}): {[round(x, 4) for x in losses]}")
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0] - 0.01


def test_lora_checkpoint_reloads_as_the_trained_policy_with_its_setting(demos: Path, tiny_oft: Path,
                                                                        tmp_path: Path) -> None:
    cfg = oft_cfg(demos, tiny_oft, tmp_path, token_reduction=VISION, save_steps=1, save_latest_checkpoint_only=False,
                  learning_rate=2e-2)
    s = prepare(cfg, init_distributed())
    result = run(s)
    assert [r["step"] for r in result.history] == [1.0, 2.0]
    assert all(math.isfinite(r["loss"]) and r["loss"] == r["action_l1"] for r in result.history)
    ckpt = result.last_checkpoint
    for name in ("config.json", "model.safetensors", "action_head--latest_checkpoint.pt",
                 "proprio_projector--latest_checkpoint.pt", "dataset_statistics.json", "adapter", "trainer_state.pt"):
        assert (ckpt / name).exists(), name
    loaded, _ = load_vla(ckpt)
    assert hasattr(loaded, "oft") and loaded.config.token_reduction["site"] == "vision"
    assert loaded.norm_stats[DATASET]["proprio"] == s.plan.stats[DATASET]["proprio"]
    apply_token_reduction_from_config(loaded)
    batch = first_batch(s)
    torch.testing.assert_close(chunk_of(loaded, batch), chunk_of(s.vla, batch), atol=1e-5, rtol=1e-4)
    original, _ = load_vla(tiny_oft)
    apply_token_reduction_from_config(original)
    for name in ("action_head", "language_model", "vision_backbone"):  # the heads and the merged LoRA moved
        before, after = getattr(original, name).state_dict(), getattr(loaded, name).state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before), name

    # the adapter ships with its heads, loads on the base it was trained on, and gives the same chunks
    dest = adapters.install_adapter(ckpt, tmp_path / "adapter")
    assert {p.name for p in dest.iterdir()} >= {"action_head--latest_checkpoint.pt", "adapter_model.safetensors"}
    assert json.loads((dest / adapters.RECORD_FILE).read_text())["policy"] == "openvla-oft"
    adapted, _ = adapters.load_adapted_policy(dest, base=tiny_oft)
    assert get_token_reduction(adapted).settings.site == "vision"
    torch.testing.assert_close(chunk_of(adapted, batch), chunk_of(loaded, batch), atol=2e-3, rtol=1e-3)


def test_an_oft_adapter_refuses_an_openvla_base(demos: Path, tiny_oft: Path, base: Path, tmp_path: Path) -> None:
    ckpt = finetune(oft_cfg(demos, tiny_oft, tmp_path, token_reduction=VISION, max_steps=1)).last_checkpoint
    dest = adapters.install_adapter(ckpt, tmp_path / "adapter")
    with pytest.raises(ValueError, match="is for an OpenVLA-OFT policy, and the base .* is an OpenVLA policy"):
        adapters.load_adapted_policy(dest, base=base, allow_other_base=True)


def test_full_fine_tuning_saves_and_resumes_heads_and_weights(demos: Path, tiny_oft: Path, tmp_path: Path) -> None:
    cfg = oft_cfg(demos, tiny_oft, tmp_path, use_lora=False, max_steps=2, stop_at_step=1, learning_rate=1e-2)
    first = finetune(cfg).last_checkpoint
    assert not (first / "adapter").exists()
    resumed = prepare(oft_cfg(demos, tiny_oft, tmp_path / "b", use_lora=False, max_steps=2, resume_from=first),
                      init_distributed())
    assert resumed.start_step == 1
    saved, _ = load_vla(first)
    for name in ("action_head", "proprio_projector", "projector", "language_model"):
        mine, theirs = getattr(resumed.vla, name).state_dict(), getattr(saved, name).state_dict()
        assert all(torch.equal(mine[k], theirs[k]) for k in theirs), name
    assert run(resumed).history[-1]["step"] == 2.0


def test_distillation_matches_the_unreduced_teachers_chunk(demos: Path, tiny_oft: Path, tmp_path: Path) -> None:
    cfg = oft_cfg(demos, tiny_oft, tmp_path, token_reduction=VISION, distill_weight=2.0)
    s = prepare(cfg, init_distributed())
    distill = distillation_for(s)
    assert isinstance(distill, ChunkDistillation) and get_token_reduction(distill.teacher[0]) is None
    batch = first_batch(s)
    unreduced, _ = load_vla(tiny_oft)
    teacher_chunk = chunk_of(unreduced, batch)
    torch.testing.assert_close(distill.teacher_chunk(batch), teacher_chunk, atol=1e-5, rtol=1e-5)
    student = s.model(**{k: batch[k] for k in ("pixel_values", "input_ids", "attention_mask", "proprio")})
    assert (student - teacher_chunk).abs().max() > 1e-4  # the cut changes the chunk
    by_hand = 2.0 * (student.detach() - teacher_chunk).abs().mean()
    torch.testing.assert_close(distill(student.detach(), batch), by_hand)
    metrics = chunk_metrics(s.model, batch, s.info.device, False, distill)
    torch.testing.assert_close(metrics["loss"], metrics["action_l1"] + metrics["aux_loss"])
    history = run(s, aux_loss=distill).history
    assert all("aux_loss" in r and r["aux_loss"] > 0 for r in history)


def test_the_policys_own_statistics_are_kept_when_asked(demos: Path, tiny_oft: Path, tmp_path: Path) -> None:
    import shutil

    own = load_vla(tiny_oft)[0].norm_stats[DATASET]
    s = prepare(oft_cfg(demos, tiny_oft, tmp_path, norm_stats_from_vla=True), init_distributed())
    assert s.plan.stats[DATASET]["action"] == own["action"] and s.plan.stats[DATASET]["proprio"] == own["proprio"]
    assert s.plan.stats[DATASET]["num_transitions"] == s.plan.num_transitions  # the data's own count
    no_proprio = tmp_path / "no_proprio"
    shutil.copytree(tiny_oft, no_proprio)
    stats_file = no_proprio / "dataset_statistics.json"
    stats = json.loads(stats_file.read_text())
    del stats[DATASET]["proprio"]
    stats_file.write_text(json.dumps(stats))
    with pytest.raises(ValueError, match=f"norm_stats_from_vla=True needs \\['action', 'proprio'\\] statistics for "
                                         f"dataset '{DATASET}'"):
        prepare(oft_cfg(demos, no_proprio, tmp_path, norm_stats_from_vla=True), init_distributed())


def test_earlier_rounds_train_beside_the_data_root(demos: Path, tiny_oft: Path, base: Path, tmp_path: Path) -> None:
    """aggregate_data_roots (DAgger's aggregation, as the MetaWorld adapters' --onpolicy_aggregate uses it): the
    plan counts every root's steps and the statistics are those of all of them; a root that is the data root
    itself or holds no such dataset is refused on the config, and an OpenVLA policy's data refuses the field."""
    import shutil

    from prismatic_tr.data.oft import OFTChunkSource, oft_statistics

    again = tmp_path / "round2"
    shutil.copytree(demos, again)
    alone = prepare(oft_cfg(demos, tiny_oft, tmp_path), init_distributed())
    both = prepare(oft_cfg(demos, tiny_oft, tmp_path, aggregate_data_roots=[again]), init_distributed())
    assert both.plan.num_transitions == 2 * alone.plan.num_transitions
    stats, one = both.plan.stats[DATASET], oft_statistics(OFTChunkSource(demos, DATASET), DATASET)[DATASET]
    assert stats["num_trajectories"] == 2 * one["num_trajectories"]
    assert stats["action"]["q99"] == pytest.approx(one["action"]["q99"])   # the same steps twice: the same bounds
    assert sum(1 for _ in itertools.islice(both.task.loader(both, seed=0), 3)) == 3
    for bad in (demos, tmp_path / "empty"):
        with pytest.raises(ValueError, match="aggregate_data_roots entry"):
            oft_cfg(demos, tiny_oft, tmp_path, aggregate_data_roots=[bad])
    from prismatic_tr.training.preflight import plan_data

    with pytest.raises(ValueError, match="an OpenVLA policy trains on data_root_dir only"):
        plan_data(oft_cfg(demos, base, tmp_path, aggregate_data_roots=[again]), world_size=1)


@pytest.mark.parametrize("extra, match", [
    (["--use_quantization", "true"], "use_quantization=True is not built for OpenVLA-OFT"),
    (["--batch_size", "100000"], "batch_size=100000 does not fit"),
    (["--token_reduction.site", "llm"], "token_reduction.site='llm' cannot be fine-tuned"),
])
def test_cli_refuses_bad_input_for_oft_policies(demos: Path, tiny_oft: Path, tmp_path: Path, capsys, extra,
                                                match) -> None:
    argv = ["--vla_path", str(tiny_oft), "--data_root_dir", str(demos), "--dataset_name", DATASET,
            "--run_root_dir", str(tmp_path / "runs"), "--max_steps", "1", "--progress_bar", "false", *extra]
    assert main(argv) == 2
    assert match in capsys.readouterr().err
    assert not list((tmp_path / "runs").glob("*/checkpoints"))


def test_openvla_style_data_is_refused_with_the_keys_it_has(tiny_oft: Path, tmp_path: Path) -> None:
    from prismatic_tr.envs.demos import DemoConfig, make_demos

    plain = tmp_path / "plain"
    make_demos(DemoConfig(num_episodes=1, seed=50, output_dir=plain, dataset_name=DATASET, progress=False))
    with pytest.raises(ValueError, match="lacks a wrist image .* step keys found"):
        prepare(oft_cfg(plain, tiny_oft, tmp_path), init_distributed())
