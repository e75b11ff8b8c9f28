"""The MetaWorld adapter (prismatic_tr.envs.metaworld): the task table, the 7-D <-> 4-D action mapping, the seed
splits and the held-out-goal check run everywhere; the environment, the scripted expert and the RLDS round trip
run where metaworld and OSMesa (libosmesa6) are installed and are skipped with the reason elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.metaworld import needs_metaworld

from prismatic_tr.envs.metaworld import (
    METAWORLD_SPLITS,
    MT10,
    TASKS,
    check_held_out_goals,
    from_metaworld,
    metaworld_task,
    nearest_goal_distance,
    to_metaworld,
)
from prismatic_tr.envs.metaworld.demos import MetaWorldDemoConfig
from prismatic_tr.envs.metaworld.tasks import STATE_DIM, STATE_FIELDS, state_of
from prismatic_tr.envs.splits import check_seeds, split_seeds

ROOT = Path(__file__).resolve().parents[2]
SIZE = 64  # frames in these tests (the adapter's default is 224)


# ---------------------------------------------------------------- tasks and instructions (no metaworld)


def test_the_task_set_is_mt10_with_one_instruction_each():
    assert MT10 == ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3", "drawer-close-v3",
                    "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3")
    from prismatic_tr.models.tokenizer import build_prompt

    instructions = [TASKS[t].instruction for t in MT10]
    assert len(set(instructions)) == 10
    for text in instructions:
        assert text == text.strip().lower() and not text.endswith(("?", ".")) and len(text.split()) >= 2
        assert build_prompt(text) == f"In: What action should the robot take to {text}?\nOut:"
    assert TASKS["pick-place-v3"].instruction == "pick the puck and place it at the goal"
    assert all(0 < TASKS[t].max_steps <= 500 for t in MT10)


def test_the_state_is_the_effector_the_gripper_and_the_goal():
    raw = np.arange(39, dtype=np.float64)
    np.testing.assert_array_equal(state_of(raw), [0, 1, 2, 3, 36, 37, 38])
    assert state_of(raw).dtype == np.float32 and STATE_DIM == len(STATE_FIELDS) == 7
    assert STATE_FIELDS[4:] == ("goal_x", "goal_y", "goal_z")
    with pytest.raises(ValueError, match="goal last"):
        state_of(np.zeros((2, 39)))


def test_an_unknown_task_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="pick-place-v2.*reach-v3"):
        metaworld_task("pick-place-v2")


def test_importing_the_adapter_imports_neither_metaworld_nor_mujoco():
    code = ("import sys, prismatic_tr.envs, prismatic_tr.envs.metaworld, prismatic_tr.envs.metaworld.demos; "
            "print(sorted(m for m in ('metaworld', 'mujoco') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- actions (no metaworld)

# (7-D OpenVLA action, 4-D MetaWorld action): dx dy dz in metres (0.01 m = one unit), gripper 1 open = -1 effort
ACTION_PAIRS = [
    ([0.0, 0.0, 0.0, 0, 0, 0, 1.0], [0.0, 0.0, 0.0, -1.0]),       # still, open
    ([0.01, -0.01, 0.005, 0, 0, 0, 0.0], [1.0, -1.0, 0.5, 1.0]),  # full speed, closed
    ([-0.002, 0.003, -0.01, 0, 0, 0, 0.5], [-0.2, 0.3, -1.0, 0.0]),  # the experts' half-shut effort 0
    ([0.0, 0.0, 0.0, 0, 0, 0, 0.2], [0.0, 0.0, 0.0, 0.6]),
]


@pytest.mark.parametrize("openvla, metaworld", ACTION_PAIRS)
def test_actions_map_both_ways(openvla, metaworld):
    np.testing.assert_allclose(to_metaworld(np.array(openvla)), metaworld, atol=1e-6)
    np.testing.assert_allclose(from_metaworld(np.array(metaworld)), openvla, atol=1e-7)
    assert to_metaworld(np.array(openvla)).dtype == np.float32 and from_metaworld(np.array(metaworld)).dtype == np.float32


def test_actions_round_trip_inside_the_bounds_and_batched():
    rng = np.random.default_rng(0)
    mw = rng.uniform(-1, 1, size=(5, 3, 4))
    np.testing.assert_allclose(to_metaworld(from_metaworld(mw)), mw, atol=1e-6)
    vla = from_metaworld(mw)
    assert vla.shape == (5, 3, 7) and np.all(vla[..., 3:6] == 0)
    np.testing.assert_allclose(from_metaworld(to_metaworld(vla)), vla, atol=1e-7)


def test_actions_outside_the_bounds_are_clipped_and_rotation_is_dropped():
    np.testing.assert_array_equal(to_metaworld(np.array([0.5, -0.5, 0.02, 1, 1, 1, 2.0])), [1, -1, 1, -1])
    np.testing.assert_array_equal(to_metaworld(np.array([0, 0, 0, 1, -1, 1, -1.0])), [0, 0, 0, 1])
    np.testing.assert_allclose(from_metaworld(np.array([3.0, -3.0, 0, 5])), [0.01, -0.01, 0, 0, 0, 0, 0], atol=1e-9)
    with pytest.raises(ValueError, match="7 values"):
        to_metaworld(np.zeros(4))
    with pytest.raises(ValueError, match="4 values"):
        from_metaworld(np.zeros(7))


# ---------------------------------------------------------------- seed splits and held-out goals (no metaworld)


def test_splits_are_the_tabletop_ranges_of_the_same_names_and_refuse_gaps():
    assert list(METAWORLD_SPLITS) == ["demonstrations", "validation", "test"]
    assert split_seeds("test", 50, splits=METAWORLD_SPLITS) == range(3_000_000, 3_000_050)
    with pytest.raises(ValueError, match="overlap test"):
        check_seeds("validation", 2_999_990, 20, splits=METAWORLD_SPLITS)
    with pytest.raises(ValueError, match="no split"):   # 500,000-999,999 is a gap here (tabletop's pretraining)
        check_seeds("demonstrations", 499_990, 20, splits=METAWORLD_SPLITS)
    with pytest.raises(ValueError, match="'offline' is not allowed"):
        split_seeds("offline", 5, splits=METAWORLD_SPLITS)


def test_held_out_goal_check_refuses_a_test_goal_near_a_demonstration_goal():
    demos = np.array([[0.0, 0.6, 0.02, 0.1, 0.8, 0.1], [0.05, 0.7, 0.02, -0.1, 0.85, 0.2]])
    test = np.array([[0.1, 0.65, 0.02, 0.0, 0.9, 0.15]])
    np.testing.assert_allclose(nearest_goal_distance(test, demos), [0.1])
    assert check_held_out_goals("reach-v3", test, demos) == pytest.approx(0.1)
    repeat = np.vstack([test, demos[1] + 5e-4])
    with pytest.raises(ValueError, match=r"reach-v3: test goal vectors \[1\] lie within 0.001 m"):
        check_held_out_goals("reach-v3", repeat, demos)
    with pytest.raises(ValueError, match="different lengths"):
        nearest_goal_distance(test[:, :3], demos)


# ---------------------------------------------------------------- demonstration config (no metaworld)


@pytest.mark.parametrize("kwargs, needle", [
    ({"tasks": ["pick-place-v3", "fly-v3"]}, "fly-v3"),
    ({"tasks": ["reach-v3", "reach-v3"]}, "each task once"),
    ({"episodes_per_task": 0}, "episodes_per_task"),
    ({"seed": 499_990, "episodes_per_task": 5, "max_failures": 10}, "no split"),
    ({"image_size": 8}, "image size 8"),
    ({"dataset_name": "Bad-Name"}, "Bad-Name"),
    ({"task_episodes": {"fly-v3": 3}}, "'fly-v3', which is not among --tasks"),
    ({"tasks": ["push-v3"], "task_episodes": {"reach-v3": 3}}, "'reach-v3', which is not among --tasks"),
    ({"task_episodes": {"reach-v3": 0}}, "reach-v3: 0 is not allowed"),
    ({"seed": 499_900, "task_episodes": {"reach-v3": 200}}, "no split"),
])
def test_demo_config_refuses_bad_values(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        MetaWorldDemoConfig(**kwargs)


def test_demo_config_counts_per_task():
    cfg = MetaWorldDemoConfig(tasks=["reach-v3", "push-v3"], episodes_per_task=5, max_failures=2, seed=10,
                              task_episodes={"push-v3": 8})
    assert (cfg.episodes_of("reach-v3"), cfg.episodes_of("push-v3")) == (5, 8)
    assert cfg.seed_range("reach-v3") == range(10, 17) and cfg.seed_range("push-v3") == range(10, 20)
    assert cfg.seeds_per_task == 10


def test_script_exits_2_naming_the_allowed_tasks():
    script, env = ROOT / "vla_scripts" / "make_metaworld_demos.py", {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run([sys.executable, str(script), "--tasks", "pick-place-v3,fly-v3"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "fly-v3" in bad.stderr and "window-close-v3" in bad.stderr


# ---------------------------------------------------------------- the environment (metaworld + OSMesa)
# mujoco with OSMesa and tensorflow crash one process (each loads an LLVM), and other tests import tensorflow: every
# check that makes an environment runs in a fresh process (run_fresh), never in the test process.


def run_fresh(check: str, *args: object) -> None:
    """Run this module's function ``check(*args)`` in a fresh Python process; fail with its stderr if it fails."""
    here = Path(__file__).resolve().parent  # the test and tests/ (its helpers)
    code = (f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; import {Path(__file__).stem} as t; "
            f"t.{check}(*{args!r})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-4000:]


def check_smoke_episode() -> None:
    from prismatic_tr.envs.metaworld import MetaWorldEnv, rollout, scripted_expert

    with MetaWorldEnv("reach-v3", image_size=SIZE) as env:
        obs = env.reset(seed=0)
        for frame in (obs.image, obs.wrist_image):
            assert frame.shape == (SIZE, SIZE, 3) and frame.dtype == np.uint8
            assert frame.std() > 10 and len(np.unique(frame.reshape(-1, 3), axis=0)) > 50  # not blank
        assert not np.array_equal(obs.image, obs.wrist_image)
        assert obs.state.shape == (7,) and obs.state.dtype == np.float32 and obs.state[3] > 0.9  # gripper open
        np.testing.assert_array_equal(obs.state[4:], obs.raw[-3:].astype(np.float32))     # the goal, last
        assert np.linalg.norm(obs.state[4:] - obs.state[:3]) > 0.05                        # not the hand
        assert obs.instruction == "reach the goal position"
        step = env.step(np.array([0.01, 0, 0, 0, 0, 0, 1.0]))  # +x for one step: the hand moves +x
        assert step.observation.state[0] > obs.state[0] and not step.done
        np.testing.assert_allclose(step.info["action"], [1, 0, 0, -1])
        result = rollout(env, scripted_expert("reach-v3"), seed=0, record=True)
    assert result.success and result.steps <= TASKS["reach-v3"].max_steps, (result.outcome, result.steps)
    assert len(result.images) == len(result.third_person_images) == len(result.actions) == result.steps


def check_seeds_set_scenes_and_test_goals_are_held_out() -> None:
    from prismatic_tr.envs.metaworld import MetaWorldEnv, goal_vectors

    with MetaWorldEnv("pick-place-v3", render=False) as env:
        first = env.reset(seed=7).raw
        env.step(np.array([0.01, 0.01, -0.01, 0, 0, 0, 0.0]))
        other = env.reset(seed=8).raw
        again = env.reset(seed=7).raw
    np.testing.assert_array_equal(first, again)        # the seed alone sets the scene
    assert np.abs(first[-3:]).sum() > 0 and not np.allclose(first[-3:], other[-3:])  # goal observable, per seed
    for task in ("pick-place-v3", "door-open-v3"):
        demos = goal_vectors(task, split_seeds("demonstrations", 30, splits=METAWORLD_SPLITS))
        test = goal_vectors(task, split_seeds("test", 5, splits=METAWORLD_SPLITS))
        assert len(np.unique(demos, axis=0)) == 30
        assert check_held_out_goals(task, test, demos) > 1e-3


@needs_metaworld
def test_smoke_the_expert_solves_reach_within_the_cap_and_frames_are_real():
    run_fresh("check_smoke_episode")


@needs_metaworld
def test_a_seed_sets_the_scene_and_test_goals_are_held_out():
    run_fresh("check_seeds_set_scenes_and_test_goals_are_held_out")


@needs_metaworld
@pytest.mark.slow
def test_demonstrations_round_trip_through_the_projects_reader(tmp_path):
    """make_metaworld_demos.py (its experts in a child process) writes 3 episodes (2 of reach by --task_episodes, 1
    of pick-place); the OFT reader reads them here."""
    pytest.importorskip("tensorflow_datasets")
    import torch  # noqa: F401  (torch before tensorflow)

    from prismatic_tr.data import RLDSSource
    from prismatic_tr.data.oft import OFTChunkSource

    script = ROOT / "vla_scripts" / "make_metaworld_demos.py"
    flags = ["--tasks", "reach-v3,pick-place-v3", "--episodes_per_task", "1", "--task_episodes", "{reach-v3: 2}",
             "--output_dir", str(tmp_path),
             "--dataset_name", "mw_test", "--image_size", str(SIZE), "--progress", "false"]
    out = subprocess.run([sys.executable, str(script), *flags], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-4000:]
    assert "reach-v3: expert success 2/2" in out.stdout and "pick-place-v3: expert success 1/1" in out.stdout
    summary = json.loads((tmp_path / "mw_test" / "demos.json").read_text())
    assert {t: summary["tasks"][t]["written"] for t in summary["tasks"]} == {"reach-v3": 2, "pick-place-v3": 1}
    assert summary["state_fields"] == list(STATE_FIELDS)
    src = OFTChunkSource(tmp_path, "mw_test", chunk=4, num_images=2)
    assert src.num_episodes == 3 and src.image_keys == ["observation/image", "observation/wrist_image"]
    steps = list(src.decode(src.step_dataset()).as_numpy_iterator())
    lengths = [summary["tasks"][t]["transitions"] for t in ("reach-v3", "pick-place-v3")]
    assert len(steps) == sum(lengths) == RLDSSource(tmp_path, "mw_test").num_transitions()
    first, last = steps[0], steps[-1]
    assert first["instruction"].decode() == TASKS["reach-v3"].instruction
    assert last["instruction"].decode() == TASKS["pick-place-v3"].instruction
    for step in (first, last):
        assert [im.shape for im in step["images"]] == [(SIZE, SIZE, 3)] * 2 and step["images"][0].dtype == np.uint8
        assert step["images"][0].std() > 10 and step["state"].shape == (7,) and step["actions"].shape == (4, 7)
    assert np.all(np.abs(last["actions"][:, :3]) <= 0.01 + 1e-6)


# ---------------------------------------------------------------- a policy in the closed loop (metaworld + OSMesa)


def check_a_policy_runs_metaworld_closed_loop_drawing_only_what_it_reads() -> None:
    """A tiny random OFT policy (2 cameras, proprio 7, chunks of 8) through ``run_metaworld``: two validation
    episodes of reach capped at 10 steps, in one lockstep batch; frames drawn only at the two predictions of each
    episode (steps 0 and 8), both cameras; an observation read after its episode moved on is refused."""
    from prismatic_tr.envs.metaworld import env as env_module
    from prismatic_tr.envs.metaworld.episode import MetaWorldEpisode
    from prismatic_tr.models import build_oft_vla, build_processor
    from prismatic_tr.policy.metaworld import metaworld_record, run_metaworld

    four = build_oft_vla("tiny", oft={"num_images_in_input": 2, "proprio_dim": 4}, seed=0)
    with pytest.raises(ValueError, match="takes a state of 4; MetaWorld episodes give 7"):
        run_metaworld(four, build_processor(four.config), ["reach-v3"], "validation", 2, "bridge_orig")
    vla = build_oft_vla("tiny", oft={"num_images_in_input": 2, "proprio_dim": STATE_DIM}, seed=0)
    drawn: list[str] = []
    render = env_module.MetaWorldEnv.render
    env_module.MetaWorldEnv.render = lambda self, camera: drawn.append(camera) or render(self, camera)
    outcomes = run_metaworld(vla, build_processor(vla.config), ["reach-v3"], "validation", 2, "bridge_orig",
                             image_size=SIZE, batch_size=2, max_steps=10)
    episodes = outcomes["reach-v3"]
    assert [o.seed for o in episodes] == [1_000_000, 1_000_001]
    assert all(o.outcome in ("timeout", "success") and 1 <= o.steps <= 10 for o in episodes)
    if all(o.outcome == "timeout" for o in episodes):
        assert sorted(drawn) == sorted(["corner3", "gripperPOV"] * 4), drawn  # 2 episodes x 2 predictions
    record = metaworld_record(outcomes, "validation")
    assert record["tasks"]["reach-v3"]["episodes"] == 2 and 0 <= record["mean_success_rate"] <= 1
    episode = MetaWorldEpisode("reach-v3", seed=1_000_000, image_size=SIZE)
    first = episode.reset()
    episode.step(np.zeros(7))
    with pytest.raises(RuntimeError, match="moved on"):
        first.third_person  # noqa: B018
    episode.close()
    episode.close()


def check_a_pooled_environment_gives_the_episode_a_new_one_gives() -> None:
    """Episode 1,000,001 of push run on an environment that first ran episode 1,000,000 (an EpisodePool) equals
    the same episode on a new environment: every state and both frames at the end, under the same actions."""
    from prismatic_tr.envs.metaworld.episode import EpisodePool, MetaWorldEpisode

    actions = np.random.default_rng(0).uniform(-0.01, 0.01, size=(12, 7))
    actions[:, 6] = np.linspace(0, 1, 12)

    def run(episode: MetaWorldEpisode) -> tuple[list[np.ndarray], np.ndarray]:
        states = [episode.reset().proprio]
        for a in actions:
            obs = episode.step(a).observation
            states.append(obs.proprio)
        frames = np.concatenate([obs.third_person, obs.image])
        episode.close()
        return states, frames

    with EpisodePool("push-v3", SIZE) as pool:
        run(pool.episode(1_000_000))
        reused = run(pool.episode(1_000_001))
        assert pool.built == 1
        other = pool.episode(1)
        with pytest.raises(ValueError, match="needs 'reach-v3'"):
            MetaWorldEpisode("reach-v3", 0, env=other.env)
        other.close()
    fresh = run(MetaWorldEpisode("push-v3", 1_000_001, SIZE))
    np.testing.assert_array_equal(np.stack(reused[0]), np.stack(fresh[0]))
    np.testing.assert_array_equal(reused[1], fresh[1])


@needs_metaworld
def test_a_pooled_environment_gives_the_episode_a_new_one_gives():
    run_fresh("check_a_pooled_environment_gives_the_episode_a_new_one_gives")


@needs_metaworld
@pytest.mark.slow
def test_a_policy_runs_metaworld_closed_loop_drawing_only_what_it_reads():
    run_fresh("check_a_policy_runs_metaworld_closed_loop_drawing_only_what_it_reads")


def test_metaworld_evaluation_refuses_bad_tasks_and_splits_before_any_episode():
    from prismatic_tr.policy.metaworld import run_metaworld

    with pytest.raises(ValueError, match="fly-v3"):
        run_metaworld(None, None, ["reach-v3", "fly-v3"], "test", 2, "k")
    with pytest.raises(ValueError, match="'offline' is not allowed"):
        run_metaworld(None, None, ["reach-v3"], "offline", 2, "k")


def check_patch_labels_follow_the_scene() -> None:
    from prismatic_tr.envs.metaworld.env import MetaWorldEnv
    from prismatic_tr.envs.metaworld.patch_labels import LABELS, PatchLabeller

    with MetaWorldEnv("push-v3", image_size=SIZE) as env:
        env.reset(1_000_000)
        with PatchLabeller(env, grid=4) as labeller:
            pixels = labeller.pixel_labels("corner3")
            assert pixels.shape == (SIZE, SIZE) and set(np.unique(pixels)) <= {-1, 0, 1, 2}
            third, wrist = labeller.labels("corner3"), labeller.labels("gripperPOV")
            assert set(third) == set(LABELS) and all(v.shape == (16,) and v.dtype == bool for v in third.values())
            assert third["object"].any() and third["goal"].any() and third["gripper"].any()  # puck, marker, hand
            assert wrist["gripper"].sum() > third["gripper"].sum()  # the wrist camera sees its own fingers large
            # a patch is labelled where its pixels are: the block sums of the pixel map
            blocks = (pixels == LABELS.index("object")).reshape(4, SIZE // 4, 4, SIZE // 4).sum(axis=(1, 3))
            assert np.array_equal(third["object"], blocks.reshape(-1) >= 1)
            moved = env.step(np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])).observation  # the hand moves up, the puck stays
            assert moved is not None and np.array_equal(labeller.labels("corner3")["object"], third["object"])
        try:
            PatchLabeller(env, grid=5)
        except ValueError as err:
            assert "grid=5" in str(err)
        else:
            raise AssertionError("a grid that does not divide the frame was accepted")


@needs_metaworld
def test_patch_labels_name_the_object_the_goal_and_the_gripper():
    run_fresh("check_patch_labels_follow_the_scene")
