"""The tabletop task (prismatic_tr.envs): the expert solves it, seeds reproduce episodes, the dynamics follow
the documented rules (bounds, grasps, step limit), everything the expert uses is visible, bad input fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prismatic_tr.envs import (
    SUCCESS,
    TIMEOUT,
    WRONG_OBJECT,
    ExecutionNoise,
    ScriptedExpert,
    TabletopEnv,
    TaskConfig,
    in_grasp_zone,
    make_episode,
    rollout,
    sample_scene,
    spec,
)
from prismatic_tr.envs.expert import CLOSE_HEIGHT, CLOSE_RADIUS, LOWER_Z
from prismatic_tr.envs.render import finger_boxes

ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(50)
MAX_EXPERT_STEPS = 20  # spec.DEFAULT_MAX_STEPS leaves a policy twice the expert's longest episode


def expert_run(seed: int, config: TaskConfig | None = None, **kwargs):
    env = make_episode(seed, config)
    return env, rollout(env, ScriptedExpert().policy(env), **kwargs)


def go_to(x: float, y: float, z: float, gripper: float):
    """A policy that steers to (x, y, z) with the largest allowed steps, commanding ``gripper`` throughout."""

    def act(env: TabletopEnv) -> np.ndarray:
        ex, ey, ez = env.state.effector
        return np.array([x - ex, y - ey, z - ez, 0, 0, 0, gripper])

    return act


def drive(env: TabletopEnv, act, steps: int):
    result = None
    for _ in range(steps):
        result = env.step(act(env))
        if result.done:
            break
    return result


def test_expert_succeeds_on_every_seed():
    results = [expert_run(seed)[1] for seed in SEEDS]
    assert [r.outcome for r in results] == [SUCCESS] * len(SEEDS)
    assert {r.kind for r in results} == set(spec.TASK_KINDS)
    assert max(r.steps for r in results) <= MAX_EXPERT_STEPS < spec.DEFAULT_MAX_STEPS
    assert min(r.steps for r in results) >= 3  # the effector starts MIN_START_DISTANCE away


@pytest.mark.parametrize("config", [
    TaskConfig(kinds=("pick",)), TaskConfig(min_objects=1, max_objects=1),
    TaskConfig(min_objects=6, max_objects=6, distinct_attributes=False),
])
def test_expert_succeeds_under_other_configs(config):
    assert all(expert_run(seed, config)[1].success for seed in range(15))


def test_expert_recovers_from_execution_noise():
    for seed in range(20):
        env = make_episode(seed)
        noisy = rollout(env, ScriptedExpert().policy(env), record=True, perturb=ExecutionNoise(0.5, 0.3, seed))
        assert noisy.success, seed
        again = rollout(env, ScriptedExpert().policy(env), record=True, perturb=ExecutionNoise(0.5, 0.3, seed))
        assert np.array_equal(np.stack(noisy.actions), np.stack(again.actions))


def test_noise_shows_the_expert_a_closed_gripper_and_it_opens_it():
    closed_seen = False
    for seed in range(10):
        env = make_episode(seed)
        res = rollout(env, ScriptedExpert().policy(env), record=True, perturb=ExecutionNoise(0.0, 0.5, seed))
        for state, action in zip(res.states, res.actions, strict=True):
            if not state.gripper_open:
                closed_seen = True
                assert action[6] == spec.GRIPPER_OPEN
    assert closed_seen


def test_episodes_reproduce_exactly_by_seed():
    for seed in (0, 7, 123456):
        _, a = expert_run(seed, record=True)
        _, b = expert_run(seed, record=True)
        assert a.instruction == b.instruction and a.steps == b.steps
        assert all(x.tobytes() == y.tobytes() for x, y in zip(a.images + [a.final_image], b.images + [b.final_image], strict=True))
        assert np.array_equal(np.stack(a.actions), np.stack(b.actions))
    env = make_episode(5)
    first = env.reset().image
    drive(env, go_to(0, 0, 0.1, 1.0), 3)
    assert env.reset().image.tobytes() == first.tobytes() and env.state.steps == 0


def test_different_seeds_give_different_episodes():
    scenes = [sample_scene(seed) for seed in range(20)]
    layouts = {tuple((o.name, round(o.x, 6), round(o.y, 6)) for o in s.objects) for s in scenes}
    assert len(layouts) == 20
    assert len({s.instruction for s in scenes}) > 5 and len({s.look.texture_seed for s in scenes}) == 20
    images = [make_episode(seed).render().tobytes() for seed in range(8)]
    assert len(set(images)) == 8


def test_scenes_are_well_formed():
    for seed in range(100):
        scene = sample_scene(seed)
        names = [o.name for o in scene.objects]
        assert len(set(names)) == len(names) and 3 <= len(names) <= 5
        assert len({o.color for o in scene.objects}) == len(names) == len({o.shape for o in scene.objects})
        xy = np.array([(o.x, o.y) for o in scene.objects])
        gaps = np.hypot(*(xy[:, None] - xy[None]).transpose(2, 0, 1)) + np.eye(len(xy))
        assert gaps.min() >= spec.MIN_OBJECT_SPACING and np.abs(xy).max() <= spec.OBJECT_XY
        assert scene.instruction.endswith(scene.target_object.name)
    shared = TaskConfig(min_objects=5, max_objects=5, distinct_attributes=False)
    colors = [[o.color for o in sample_scene(seed, shared).objects] for seed in range(30)]
    assert any(len(set(c)) < len(c) for c in colors)  # colours repeat, names never do


def test_expert_actions_stay_within_documented_bounds():
    actions = np.concatenate([np.stack(expert_run(seed, record=True)[1].actions) for seed in SEEDS])
    assert actions.dtype == np.float32 and actions.shape[1] == spec.ACTION_DIM
    assert (actions >= spec.ACTION_LOW - 1e-7).all() and (actions <= spec.ACTION_HIGH + 1e-7).all()
    assert (actions[:, 3:6] == 0).all() and set(np.unique(actions[:, 6])) == {0.0, 1.0}
    saturated = np.isclose(np.abs(actions[:, :2]), spec.MAX_XY_STEP, atol=1e-6).mean()
    assert saturated > 0.4  # clipped proportional control: most moves are full steps


def test_actions_are_clipped_rotation_ignored_and_workspace_clamped():
    env = make_episode(1)
    x, y, z = env.state.effector
    info = env.step([5, -5, 5, 3, 3, 3, 7]).info
    assert np.allclose(info.action, [spec.MAX_XY_STEP, -spec.MAX_XY_STEP, spec.MAX_Z_STEP, *[spec.MAX_ROT_STEP] * 3, 1])
    assert np.allclose(env.state.effector, (x + spec.MAX_XY_STEP, y - spec.MAX_XY_STEP, min(z + spec.MAX_Z_STEP, spec.WORKSPACE_Z[1])))
    a, b = make_episode(2), make_episode(2)
    a.step([0.01, 0.01, -0.01, 0, 0, 0, 1])
    b.step([0.01, 0.01, -0.01, 0.2, -0.2, 0.1, 1])
    assert a.state.effector == b.state.effector and a.render().tobytes() == b.render().tobytes()
    drive(a, lambda env: np.array([1, 1, 1, 0, 0, 0, 1.0]), 30)
    assert a.state.effector == (spec.WORKSPACE_XY, spec.WORKSPACE_XY, spec.WORKSPACE_Z[1])


def _pick_scene_seed() -> int:
    return next(s for s in range(100) if sample_scene(s).kind == "pick" and len(sample_scene(s).objects) >= 3)


def test_grasping_a_wrong_object_fails():
    env = make_episode(_pick_scene_seed())
    other = next(o for i, o in enumerate(env.scene.objects) if i != env.scene.target)
    drive(env, go_to(other.x, other.y, LOWER_Z, 1.0), 15)
    assert not env.state.done and in_grasp_zone(env.state.effector, other)
    obs, reward, done, info = env.step([0, 0, 0, 0, 0, 0, 0.2])
    assert done and reward == 0.0 and not info.success
    assert info.outcome == WRONG_OBJECT and info.grasped == other.name
    with pytest.raises(RuntimeError, match="over"):
        env.step(np.zeros(7))


def test_pick_needs_a_close_inside_the_zone_and_reach_does_not():
    env = make_episode(_pick_scene_seed())
    target = env.scene.target_object
    drive(env, go_to(target.x, target.y, LOWER_Z, 1.0), 15)
    assert not env.state.done  # in the zone with the gripper open: not yet picked
    obs, reward, done, info = env.step([0, 0, 0, 0, 0, 0, 0.0])
    assert done and reward == 1.0 and info.grasped == target.name and not env.state.gripper_open
    reach = make_episode(next(s for s in range(100) if sample_scene(s).kind == "reach"))
    t = reach.scene.target_object
    result = drive(reach, go_to(t.x, t.y, LOWER_Z, 1.0), 15)
    assert result.info.success and reach.state.gripper_open and in_grasp_zone(reach.state.effector, t)


def test_closing_on_air_grasps_nothing_and_is_visible():
    env = make_episode(_pick_scene_seed())
    open_image = env.render()
    result = env.step([0, 0, 0, 0, 0, 0, 0])  # starts >= 5 cm high: nothing in reach
    assert not result.done and not env.state.gripper_open and result.info.grasped is None
    assert result.observation.image.tobytes() != open_image.tobytes()
    expert = ScriptedExpert()
    assert expert.act(env.state)[6] == spec.GRIPPER_OPEN  # the expert opens it again
    while not env.state.done:
        env.step(expert.act(env.state))
    assert env.state.success


def test_step_limit_ends_the_episode():
    env = make_episode(3, TaskConfig(max_steps=6))
    result = drive(env, lambda e: np.array([0, 0, 0, 0, 0, 0, 1.0]), 100)
    assert result.done and result.info.outcome == TIMEOUT and env.state.steps == 6 and result.reward == 0.0
    short = rollout(make_episode(3), lambda image, text: np.zeros(7), max_steps=4)
    assert short.outcome == TIMEOUT and short.steps == 4 and not short.success


def test_what_the_expert_uses_is_visible():
    env = make_episode(4)
    x, y, z = env.state.effector
    base = env._renderer.render((x, y, z), True)
    for moved in ((x + 0.005, y, z), (x, y + 0.005, z), (x, y, z - 0.01), (x, y, CLOSE_HEIGHT + 0.01)):
        assert env._renderer.render(moved, True).tobytes() != base.tobytes(), moved
    low = env._renderer.render((x, y, LOWER_Z), True)
    assert env._renderer.render((x, y, LOWER_Z), False).tobytes() != low.tobytes()
    assert np.abs(env._renderer.render((x, y, CLOSE_HEIGHT + 0.01), True).astype(int) - low).sum() > 2000
    assert CLOSE_RADIUS < spec.GRASP_RADIUS and LOWER_Z < CLOSE_HEIGHT < spec.GRASP_HEIGHT
    for u0, v0, u1, v1 in finger_boxes(True) + finger_boxes(False):  # the fingers sit inside the image
        assert 0 <= u0 < u1 < spec.IMAGE_SIZE and 0 <= v0 < v1 < spec.IMAGE_SIZE
    # eye in hand: the target's offset from the image centre is its offset from the effector
    t = env.scene.target_object
    u, v = spec.to_pixels(t.x, t.y, (x, y, z))
    ppm = (spec.IMAGE_SIZE / 2) / spec.view_half_width(z)
    assert u == pytest.approx(112 + ppm * (t.x - x)) and v == pytest.approx(112 - ppm * (t.y - y))
    from prismatic_tr.envs.expert import HOVER_Z

    assert spec.view_half_width(HOVER_Z) > spec.OBJECT_XY + spec.WORKSPACE_XY  # at travel height every object is in view


def test_observation_format():
    env = make_episode(0)
    obs = env.reset()
    assert obs.image.shape == (224, 224, 3) and obs.image.dtype == np.uint8
    assert obs.instruction == env.instruction and obs.instruction.split()[0] in ("pick", "move")
    assert obs.instruction in (t.format(env.scene.target_object.name) for t in spec.INSTRUCTION_TEMPLATES.values())


@pytest.mark.parametrize("make, needle", [
    (lambda: TabletopEnv(seed=-1), "-1"),
    (lambda: TabletopEnv(seed=1.5), "1.5"),
    (lambda: TabletopEnv(seed="3"), "'3'"),
    (lambda: TabletopEnv(seed=True), "True"),
    (lambda: TabletopEnv(seed=0, config={"max_steps": 3}), "TaskConfig"),
    (lambda: TaskConfig(min_objects=0), "min_objects=0"),
    (lambda: TaskConfig(max_objects=6), "max_objects=6"),
    (lambda: TaskConfig(min_objects=4, max_objects=3), "min_objects=4"),
    (lambda: TaskConfig(min_objects=7, max_objects=7, distinct_attributes=False), "7"),
    (lambda: TaskConfig(kinds=("fly",)), "fly"),
    (lambda: TaskConfig(kinds=()), "kinds=[]"),
    (lambda: TaskConfig(kinds=("pick", "pick")), "pick"),
    (lambda: TaskConfig(max_steps=0), "max_steps=0"),
    (lambda: ExecutionNoise(motion_noise=1.5), "motion_noise=1.5"),
    (lambda: ExecutionNoise(gripper_noise=-0.1), "gripper_noise=-0.1"),
    (lambda: rollout(make_episode(0), lambda i, t: np.zeros(7), max_steps=0), "max_steps=0"),
    (lambda: make_episode(0).step(np.zeros(6)), "(6,)"),
    (lambda: make_episode(0).step([0, 0, float("nan"), 0, 0, 0, 1]), "nan"),
    (lambda: ScriptedExpert().policy(make_episode(0))(np.zeros((224, 224, 3), np.uint8), "open the door"), "open the door"),
])
def test_bad_arguments_raise_value_error_naming_the_value(make, needle):
    with pytest.raises(ValueError) as err:
        make()
    assert needle in str(err.value)


def test_the_task_imports_without_torch():
    code = "import sys, prismatic_tr.envs; assert 'torch' not in sys.modules and 'tensorflow' not in sys.modules"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
