"""The OpenVLA-OFT-style tabletop policy: data with both cameras and chunks, the model made from an OpenVLA-style
one, L1 training, closed-loop chunks and the one command (``vla_scripts/train_oft_policy.py``) at toy size.

Nothing here times anything; the success of the full-size policy is measured by the command and recorded in
``benchmarks/results/oft_policy/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.oft_fixtures import DEMO_SEEDS, SETTINGS, write_oft_demos, write_tiny_base, write_tiny_oft

from prismatic_tr.data.oft import (
    OFTChunkSource,
    OFTChunkSources,
    OFTChunkTransform,
    OFTCollator,
    oft_statistics,
)
from prismatic_tr.envs import make_episode
from prismatic_tr.envs.demos import DemoConfig, expert_episode, make_demos
from prismatic_tr.envs.env import Observation
from prismatic_tr.models import load_vla
from prismatic_tr.models.oft import camera_inputs, normalize_oft_actions, unnormalize_oft_actions
from prismatic_tr.policy.closed_loop import run_episodes
from prismatic_tr.policy.oft_policy import SHARED, l1_loss, oft_from_openvla, predict_chunk, train_oft
from prismatic_tr.policy.oft_recipe import DATASET
from vla_scripts import train_oft_policy


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_oft_demos(tmp_path_factory.mktemp("oft_demos"))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight OpenVLA-style checkpoint (preset tiny) with the task's processor."""
    return write_tiny_base(tmp_path_factory.mktemp("oft_base"))


def steps_of(demos: Path) -> list[dict[str, Any]]:
    source = OFTChunkSource(demos, DATASET, chunk=8, num_images=2)
    return list(source.decode(source.step_dataset()).as_numpy_iterator())


def test_demonstrations_hold_both_cameras_the_state_and_chunks(demos: Path) -> None:
    steps = steps_of(demos)
    episodes = [expert_episode(s, DemoConfig(min_objects=1, max_objects=3).task_config(), third_person=True)
                for s in DEMO_SEEDS]
    assert len(steps) == sum(len(e.actions) for e in episodes)
    i = 0
    for ep in episodes:
        actions = np.stack(ep.actions)
        n = len(actions)
        for t in range(n):
            step = steps[i + t]
            primary, wrist = step["images"]
            assert np.array_equal(primary, ep.third_person_images[t])  # OFT's layout: image = third-person
            assert np.array_equal(wrist, ep.images[t])                 # wrist_image = eye-in-hand
            expected = actions[np.minimum(np.arange(t, t + 8), n - 1)]  # the last action repeated past the end
            np.testing.assert_array_equal(step["actions"], expected)
            np.testing.assert_allclose(step["state"], [*ep.states[t].effector, float(ep.states[t].gripper_open)],
                                       atol=1e-6)
        i += n


def test_several_datasets_train_as_one_and_must_hold_the_same_steps(demos: Path) -> None:
    """OFTChunkSources (DAgger's aggregation of on-policy rounds): the steps of every source, one after another, as
    each gives them (compared encoded: no image decoded); sources whose steps differ (here: one camera against two)
    are refused."""
    one = OFTChunkSource(demos, DATASET, chunk=8, num_images=2)
    both = OFTChunkSources([one, OFTChunkSource(demos, DATASET, chunk=8, num_images=2)])
    steps, alone = list(both.step_dataset().as_numpy_iterator()), list(one.step_dataset().as_numpy_iterator())
    assert len(steps) == 2 * len(alone) and both.num_episodes == 2 * one.num_episodes
    for a, b in zip(steps[len(alone):], alone, strict=True):
        np.testing.assert_array_equal(a["actions"], b["actions"])
        assert a["images"] == b["images"] and a["instruction"] == b["instruction"]
    with pytest.raises(ValueError, match="cameras 1 vs 2"):
        OFTChunkSources([one, OFTChunkSource(demos, DATASET, chunk=8, num_images=1)])


def test_openvla_style_demonstrations_are_unchanged(tmp_path: Path) -> None:
    make_demos(DemoConfig(num_episodes=1, seed=40, output_dir=tmp_path, dataset_name="plain", progress=False))
    from prismatic_tr.data import RLDSSource

    step = next(RLDSSource(tmp_path, "plain").step_dataset().as_numpy_iterator())
    first = make_episode(40, DemoConfig().task_config()).reset().image
    import io

    from PIL import Image

    assert np.array_equal(np.asarray(Image.open(io.BytesIO(step["image"]))), first)
    with pytest.raises(ValueError, match="wrist image"):
        OFTChunkSource(tmp_path, "plain", num_images=2)


def test_statistics_and_examples_normalise_as_oft(demos: Path, base: Path) -> None:
    source = OFTChunkSource(demos, DATASET, chunk=8, num_images=2)
    stats = oft_statistics(source, DATASET)[DATASET]
    assert set(stats) >= {"action", "proprio"} and len(stats["proprio"]["q01"]) == 4
    assert stats["proprio"]["mask"] == [True] * 4 and stats["action"]["mask"] == [True] * 6 + [False]
    _, processor = load_vla(base)
    step = steps_of(demos)[5]
    example = OFTChunkTransform(processor, stats)(step)
    images = [[step["images"][0]], [step["images"][1]]]
    inputs = camera_inputs(processor, ["In: What action should the robot take to "
                                       f"{step['instruction'].decode()}?\nOut:"], images)
    assert torch.equal(example["pixel_values"], inputs["pixel_values"][0])  # as at inference
    assert torch.equal(example["input_ids"], inputs["input_ids"][0])
    back = unnormalize_oft_actions(example["actions"].double().numpy(), stats["action"], "bounds_q99")
    inside = (step["actions"] >= np.array(stats["action"]["q01"])) & (step["actions"] <= np.array(stats["action"]["q99"]))
    np.testing.assert_allclose(back[inside], step["actions"][inside], atol=1e-5)
    assert float(example["actions"].abs().max()) <= 1.0 and float(example["proprio"].abs().max()) <= 1.0
    batch = OFTCollator(0)([example, OFTChunkTransform(processor, stats)(steps_of(demos)[0])])
    assert batch["pixel_values"].shape[:2] == (2, 12) and batch["actions"].shape == (2, 8, 7)


def test_normalising_actions_inverts_unnormalising_inside_the_bounds() -> None:
    stats = {"q01": [-1.0, 0.0, 0.0], "q99": [3.0, 1.0, 0.0], "min": [-2.0, 0.0, 0.0], "max": [4.0, 1.0, 0.0],
             "mask": [True, False, True]}
    raw = np.array([[2.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [9.0, 0.5, 0.0]])
    norm = normalize_oft_actions(raw, stats, "bounds_q99")
    # clipped, the gripper raw, the dimension the data never moves 0 (as OFT's data pipeline)
    np.testing.assert_allclose(norm, [[0.5, 1.0, 0.0], [-1.0, 0.0, 0.0], [1.0, 0.5, 0.0]], atol=1e-7)
    np.testing.assert_allclose(unnormalize_oft_actions(norm[:2], stats, "bounds_q99"), raw[:2], atol=1e-6)


def test_the_oft_model_takes_its_bases_modules_and_trains_on_the_inference_pass(demos: Path, base: Path) -> None:
    openvla, processor = load_vla(base)
    vla = oft_from_openvla(openvla, SETTINGS, seed=3)
    for name in SHARED:
        mine, theirs = getattr(vla, name).state_dict(), getattr(openvla, name).state_dict()
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    again = oft_from_openvla(openvla, SETTINGS, seed=3)
    assert torch.equal(again.action_head.model.fc1.weight, vla.action_head.model.fc1.weight)  # seeded
    source = OFTChunkSource(demos, DATASET, chunk=8, num_images=2)
    stats = oft_statistics(source, DATASET)
    vla.norm_stats = vla.config.norm_stats = stats
    transform = OFTChunkTransform(processor, stats[DATASET])
    steps = steps_of(demos)
    batch = OFTCollator(int(processor.tokenizer.pad_token_id))([transform(steps[i]) for i in (0, 3, 7)])
    with torch.no_grad():
        chunk = predict_chunk(vla, batch)
        acted, _ = vla.predict_action(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                      pixel_values=batch["pixel_values"], proprio=batch["proprio"], unnorm_key=DATASET)
    expected = unnormalize_oft_actions(chunk.numpy(), stats[DATASET]["action"], "bounds_q99")
    np.testing.assert_allclose(acted, expected, atol=1e-5)
    # a few AdamW steps on one batch bring the L1 loss down; towers frozen
    towers = {k: v.clone() for k, v in vla.vision_backbone.state_dict().items()}
    first = float(l1_loss(vla, batch, autocast=False).detach())
    saved: list[Path] = []
    result = train_oft(vla, iter([batch] * 30), 30, lambda step: 1.0, 2e-3, Path("unused"), 15, saved.append)
    assert float(l1_loss(vla, batch, autocast=False)) < 0.5 * first
    assert [int(r["step"]) for r in result.history] == list(range(1, 31)) and saved == [Path("unused/step_15"),
                                                                                        Path("unused/step_30")]
    assert all(torch.equal(v, vla.vision_backbone.state_dict()[k]) for k, v in towers.items())
    assert not any(p.requires_grad for p in vla.parameters())


def test_a_cut_off_training_resumes_to_the_weights_an_unbroken_one_reaches(demos: Path, base: Path,
                                                                           tmp_path: Path) -> None:
    """6 steps unbroken vs. killed after step 4 (the last state at step 3) and resumed from that state on the
    batches after the third: the same weights bit for bit, the same curve and checkpoints."""
    from prismatic_tr.policy.train_state import load_train_state

    openvla, processor = load_vla(base)
    stats = oft_statistics(OFTChunkSource(demos, DATASET, chunk=8, num_images=2), DATASET)
    transform, steps = OFTChunkTransform(processor, stats[DATASET]), steps_of(demos)
    collate = OFTCollator(int(processor.tokenizer.pad_token_id))
    data = [collate([transform(steps[i]), transform(steps[i + 1])]) for i in range(0, 12, 2)]
    identity = {"learning_rate": 2e-3}

    def run(out: Path, batches: Any, start: Any = None) -> Any:
        vla = oft_from_openvla(openvla, SETTINGS, seed=3)
        result = train_oft(vla, batches, 6, lambda step: 1.0 - step / 6, 2e-3, out / "checkpoints", 3,
                           lambda path: None, freeze_vision=False, log_every=2, start=start,
                           state_path=out / "train_state.pt", identity=identity)
        return vla, result

    whole, whole_result = run(tmp_path / "whole", iter(data))

    def killed_after_four() -> Any:
        yield from data[:4]
        raise KeyboardInterrupt  # the process dies while training step 5

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", killed_after_four())
    state = load_train_state(tmp_path / "cut" / "train_state.pt", identity)
    assert state["step"] == 3 and [int(r["step"]) for r in state["history"]] == [1, 2, 3]
    resumed, resumed_result = run(tmp_path / "cut", iter(data[3:]), start=state)
    mine, theirs = resumed.state_dict(), whole.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    assert [(r["step"], r["loss"], r["lr"]) for r in resumed_result.history] == \
        [(r["step"], r["loss"], r["lr"]) for r in whole_result.history]
    assert sorted(resumed_result.checkpoints) == [3, 6]
    with pytest.raises(ValueError, match="learning_rate: 0.002 there, 0.001 here"):
        load_train_state(tmp_path / "cut" / "train_state.pt", {"learning_rate": 1e-3})


def test_skipping_examples_continues_the_order_of_an_unbroken_pass(demos: Path) -> None:
    from prismatic_tr.data import RLDSIterableDataset

    def examples(skip: int) -> list[dict[str, Any]]:
        source = OFTChunkSource(demos, DATASET, chunk=8, num_images=2)
        it = iter(RLDSIterableDataset(source, lambda step: step, shuffle_buffer_size=50, seed=4, skip=skip))
        return [next(it) for _ in range(12)]

    whole, skipped = examples(0), examples(5)
    assert len({bytes(np.asarray(e["actions"]).tobytes()) for e in whole}) > 1  # distinct examples to tell apart
    assert all(a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
               for a, b in zip(whole[5:], skipped[:7], strict=True))
    with pytest.raises(ValueError, match="skip=-1"):
        RLDSIterableDataset(OFTChunkSource(demos, DATASET), lambda s: s, skip=-1)


class CountingOFT:
    """Counts predict_action calls of an OFT model (everything else passes through)."""

    def __init__(self, vla: Any) -> None:
        self.vla, self.calls = vla, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.vla, name)

    def predict_action(self, **kwargs: Any) -> Any:
        self.calls += 1
        return self.vla.predict_action(**kwargs)


def test_closed_loop_runs_chunks_open_loop(demos: Path, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    openvla, processor = load_vla(base)
    vla = oft_from_openvla(openvla, SETTINGS)
    vla.norm_stats = vla.config.norm_stats = oft_statistics(OFTChunkSource(demos, DATASET), DATASET)
    import prismatic_tr.policy.closed_loop as closed_loop
    from prismatic_tr.models.family import family_of

    monkeypatch.setattr(closed_loop, "family_of", lambda m: family_of(getattr(m, "vla", m)))
    for execute, seed in ((None, 3_000_000), (3, 3_000_000), (1, 3_000_001)):
        counted = CountingOFT(vla)
        [outcome] = run_episodes(counted, processor, [seed], DATASET, batch_size=1, execute_steps=execute)
        per_call = execute or 8
        assert counted.calls == -(-outcome.steps // per_call)  # one prediction per executed chunk
    with pytest.raises(ValueError, match="execute_steps"):
        run_episodes(vla, processor, [1], DATASET, execute_steps=9)
    with pytest.raises(ValueError, match="execute_steps"):
        run_episodes(openvla, processor, [1], DATASET, execute_steps=2)  # an OpenVLA model acts one step at a time


@pytest.mark.slow
def test_one_command_trains_chooses_on_validation_and_evaluates(demos: Path, base: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), "--base_policy", str(base), "--data_root", str(demos), "--max_steps", "4",
            "--batch_size", "2", "--save_steps", "2", "--lr_warmup_steps", "1", "--select_episodes", "2",
            "--eval_episodes", "2", "--test_episodes", "2", "--eval_batch_size", "2", "--execute_steps", "4",
            "--install_dir", str(tmp_path / "installed"), "--progress", "false"]
    record = train_oft_policy.main(train_oft_policy.parse_config(argv))
    assert [c["step"] for c in record["selection"]["candidates"]] == [2, 4]
    assert record["evaluation"]["validation"]["seeds"] == [1_000_000, 1_000_001]
    assert record["evaluation"]["test"]["seeds"] == [3_000_000, 3_000_001]
    assert record["execute_steps"] == 4 and record["machine"]["cores"] >= 1
    assert json.loads((out / "evaluation.json").read_text()) == record
    installed, _ = load_vla(tmp_path / "installed")
    assert installed.oft.num_actions_chunk == 8 and installed.vision_backbone.get_num_images_in_input() == 2
    assert (tmp_path / "installed" / "action_head--latest_checkpoint.pt").is_file()
    assert (out / "training_curve.csv").read_text().count("\n") == 5
    # eval_policy takes the OFT policy: the same closed loop, under a reduction setting too, timed on both cameras
    from vla_scripts import eval_policy

    rows = eval_policy.main(eval_policy.parse_config([
        "--vla_path", str(tmp_path / "installed"), "--split", "test", "--episodes", "2", "--methods", "[]",
        "--settings", "vision:diverse:0.5@0.25", "--execute_steps", "4", "--timing_runs", "1", "--batch_size", "2",
        "--output_dir", str(tmp_path / "eval"), "--progress", "false"]))
    assert [r["setting"] for r in rows][0] == "none" and len(rows) == 2
    assert rows[0]["success_rate"] == record["evaluation"]["test"]["success_rate"]  # the recipe's own closed loop
    assert rows[1]["num_patches"] < rows[0]["num_patches"] and rows[1]["predict_action_ms"] > 0
    with pytest.raises(SystemExit):
        eval_policy.main(eval_policy.parse_config(["--vla_path", str(tmp_path / "installed"), "--execute_steps", "9",
                                                   "--episodes", "1", "--methods", "[]"]))

    # the same command again finds the finished training state: nothing is trained twice, the record is the same
    again = train_oft_policy.main(train_oft_policy.parse_config(argv))
    assert again["training"] == record["training"] and again["checkpoint"] == record["checkpoint"]
    # other training flags are refused before any work; --resume false starts afresh
    with pytest.raises(SystemExit) as exc:
        train_oft_policy.parse_config([*argv, "--learning_rate", "1e-3"])
    assert exc.value.code == 2
    assert train_oft_policy.parse_config([*argv, "--learning_rate", "1e-3", "--resume", "false"]).resume is False


@pytest.mark.parametrize("argv, match", [
    (["--chunk", "0"], "--chunk 0"),
    (["--num_images", "3"], "--num_images 3"),
    (["--execute_steps", "9"], "--execute_steps 9"),
    (["--attention", "sideways"], "--attention 'sideways'"),
    (["--demo_seed", "499999", "--num_episodes", "5"], "demonstrations"),
    (["--base_policy", "/nonexistent"], "--base_policy"),
])
def test_bad_flags_exit_2(argv: list[str], match: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        train_oft_policy.parse_config(argv)
    assert exc.value.code == 2 and match in capsys.readouterr().err


@pytest.fixture(scope="module")
def tiny_oft(demos: Path, base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved random-weight OFT policy (preset tiny) with the demonstrations' statistics."""
    return write_tiny_oft(demos, base, tmp_path_factory.mktemp("tiny_oft"))


def test_oft_relabelling_student_drives_teacher_labels_every_step_with_its_chunk(tiny_oft: Path) -> None:
    from prismatic_tr.policy.closed_loop import oft_chunks
    from prismatic_tr.policy.onpolicy import relabelled_oft_episodes
    from prismatic_tr.vla import reductions_attached
    from prismatic_tr.vla.spec import parse_setting

    student, processor = load_vla(tiny_oft)
    teacher, _ = load_vla(tiny_oft)
    seeds = [3000, 3001]
    with reductions_attached(student, parse_setting("vision:diverse:0.25@0.25").reductions()), torch.no_grad():
        results = list(relabelled_oft_episodes(student, teacher, processor, seeds, DATASET, batch_size=2,
                                               execute_steps=3))
        alone = run_episodes(student, processor, seeds, DATASET, batch_size=2, execute_steps=3)
    assert [(r.seed, r.outcome, r.steps) for r in results] == [(o.seed, o.outcome, o.steps) for o in alone]
    for r in results:
        env = make_episode(r.seed, third_person=True)
        assert len(r.action_chunks) == len(r.third_person_images) == len(r.images) == r.steps
        for t in (0, r.steps - 1):
            state = np.array([*r.states[t].effector, float(r.states[t].gripper_open)], dtype=np.float32)
            obs = Observation(r.images[t], r.instruction, state, r.third_person_images[t])
            want = oft_chunks(teacher, processor, [env], [obs], DATASET)[0]
            np.testing.assert_allclose(r.action_chunks[t], want, atol=1e-5)
            np.testing.assert_allclose(r.actions[t], want[0], atol=1e-5)


def test_oft_relabelling_can_label_only_the_steps_where_the_student_plans(tiny_oft: Path) -> None:
    """label_replans_only: one recorded step per chunk the student plans (its observations, the teacher's chunk
    there), the episodes themselves unchanged (same outcomes and lengths as with every step labelled)."""
    from prismatic_tr.policy.onpolicy import relabelled_oft_episodes
    from prismatic_tr.vla import reductions_attached
    from prismatic_tr.vla.spec import parse_setting

    student, processor = load_vla(tiny_oft)
    teacher, _ = load_vla(tiny_oft)
    seeds = [3000, 3001]
    made: list[int] = []

    def make_env(seed: int):
        made.append(seed)
        return make_episode(seed, third_person=True)

    with reductions_attached(student, parse_setting("vision:diverse:0.25@0.25").reductions()), torch.no_grad():
        every = list(relabelled_oft_episodes(student, teacher, processor, seeds, DATASET, batch_size=2,
                                             execute_steps=3))
        sparse = list(relabelled_oft_episodes(student, teacher, processor, seeds, DATASET, batch_size=2,
                                              execute_steps=3, make_env=make_env, label_replans_only=True))
    assert made == seeds
    assert [(r.seed, r.outcome, r.steps, r.kind, r.target) for r in sparse] == \
        [(r.seed, r.outcome, r.steps, r.kind, r.target) for r in every]
    for full, r in zip(every, sparse, strict=True):
        assert len(r.action_chunks) == len(r.images) == len(r.states) == -(-r.steps // 3)
        for k in range(len(r.actions)):   # the k-th plan was made at step 3k: the same image and label
            np.testing.assert_array_equal(r.images[k], full.images[3 * k])
            np.testing.assert_allclose(r.action_chunks[k], full.action_chunks[3 * k], atol=1e-6)
    with pytest.raises(ValueError, match="execute_steps=9"):
        next(relabelled_oft_episodes(student, teacher, processor, seeds, DATASET, execute_steps=9))


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["vision:diverse:0.25@0.25", "diverse_merge:0.25"])
def test_fine_tuning_an_oft_policy_for_a_setting_on_relabelled_chunks(setting: str, tiny_oft: Path,
                                                                      tmp_path: Path) -> None:
    """On-policy chunks driven under the setting, then a fine-tune under it (a merging method's weighted attention
    in the training forward too)."""
    from vla_scripts import make_onpolicy_data

    data = tmp_path / "onpolicy"
    assert make_onpolicy_data.main(["--vla_path", str(tiny_oft), "--setting", setting,
                                    "--num_episodes", "2", "--execute_steps", "4", "--output_dir", str(data),
                                    "--batch_size", "2"]) == 0
    source = OFTChunkSource(data, DATASET)
    assert source.chunk_key == "action_chunk"
    steps = list(source.decode(source.step_dataset()).as_numpy_iterator())
    summary = json.loads((data / "onpolicy.json").read_text())
    assert len(steps) == summary["steps"] and steps[0]["actions"].shape == (8, 7)
    out = tmp_path / "run"
    record = train_oft_policy.main(train_oft_policy.parse_config([
        "--output_dir", str(out), "--init_oft", str(tiny_oft), "--data_root", str(data), "--setting",
        setting, "--max_steps", "2", "--batch_size", "2", "--save_steps", "2",
        "--lr_warmup_steps", "1", "--select_episodes", "0", "--eval_episodes", "1", "--test_episodes", "1",
        "--progress", "false"]))
    assert record["setting"] == setting and record["demonstrations"]["steps"] == summary["steps"]
    tuned, _ = load_vla(record["checkpoint"])
    assert tuned.norm_stats == load_vla(tiny_oft)[0].norm_stats  # the policy's own statistics kept
    assert make_onpolicy_data.main(["--vla_path", str(tiny_oft), "--execute_steps", "9", "--num_episodes", "1",
                                    "--output_dir", str(tmp_path / "x")]) == 2


def test_bundled_oft_policy_acts_as_recorded() -> None:
    """The shipped OFT-style policy (prismatic_tr/assets/tabletop_oft_policy) acts: the first 20 test episodes as its
    evaluation.json records them, episode by episode, chunks executed open loop."""
    from prismatic_tr.envs.splits import TEST, split_seeds
    from prismatic_tr.policy import bundled

    if not (bundled.BUNDLED_OFT_POLICY_DIR / "config.json").is_file():
        pytest.skip(f"no bundled OFT policy in {bundled.BUNDLED_OFT_POLICY_DIR}")
    vla, processor = bundled.load_bundled_oft_policy()
    record = json.loads((bundled.BUNDLED_OFT_POLICY_DIR / "evaluation.json").read_text())
    seeds = list(split_seeds(TEST, 20))
    outcomes = run_episodes(vla, processor, seeds, bundled.OFT_UNNORM_KEY, batch_size=20,
                            execute_steps=record["execute_steps"])
    recorded = record["evaluation"][TEST]
    failed = {kind: [o.seed for o in outcomes if o.outcome == kind] for kind in ("timeout", "wrong_object")}
    assert failed == {kind: [s for s in recorded["failed_seeds"][kind] if s <= seeds[-1]] for kind in failed}
    assert vla.oft.num_actions_chunk == 8 and vla.vision_backbone.get_num_images_in_input() == 2
