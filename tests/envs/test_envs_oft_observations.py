"""What the tabletop task gives OpenVLA-OFT-style policies (``prismatic_tr.envs``): the robot's proprio state in
every observation and, when asked for, a second fixed camera (the whole table from above, the effector drawn where
it is); the OpenVLA-style observation (the eye-in-hand image, the instruction) is unchanged by either."""

from __future__ import annotations

import numpy as np
import pytest

from prismatic_tr.envs import ScriptedExpert, make_episode
from prismatic_tr.envs.render import Renderer
from prismatic_tr.envs.spec import IMAGE_SIZE, PROPRIO_DIM, TABLE_HALF


def test_proprio_is_the_effector_and_gripper_every_step():
    env = make_episode(11)
    obs = env.reset()
    expert = ScriptedExpert().policy(env)
    for _ in range(4):
        assert obs.proprio.dtype == np.float32 and obs.proprio.shape == (PROPRIO_DIM,)
        np.testing.assert_allclose(obs.proprio, [*env.state.effector, float(env.state.gripper_open)], rtol=0,
                                   atol=1e-7)
        obs, _, done, _ = env.step(expert(obs.image, obs.instruction))
        if done:
            break
    assert obs.third_person is None  # the second camera is off unless asked for


def test_the_eye_in_hand_image_is_the_same_with_the_second_camera_on():
    plain, both = make_episode(5), make_episode(5, third_person=True)
    a, b = plain.reset(), both.reset()
    assert np.array_equal(a.image, b.image) and a.instruction == b.instruction
    assert np.array_equal(a.image, Renderer(plain.scene).render(plain.state.effector, plain.state.gripper_open))
    action = np.array([0.02, -0.01, -0.02, 0, 0, 0, 1.0])
    assert np.array_equal(plain.step(action).observation.image, both.step(action).observation.image)


def effector_pixel(x: float, y: float) -> tuple[int, int]:
    scale = IMAGE_SIZE / (2 * TABLE_HALF)
    return int(round((TABLE_HALF - y) * scale)), int(round((x + TABLE_HALF) * scale))  # (row, column)


def test_the_third_person_camera_sees_the_whole_table_and_the_effector_where_it_is():
    env = make_episode(7, third_person=True)
    first = env.reset().third_person
    assert first.dtype == np.uint8 and first.shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
    assert np.array_equal(first, make_episode(7, third_person=True).reset().third_person)  # seeds reproduce it
    row, col = effector_pixel(*env.state.effector[:2])
    assert first[row, col].max() < 60  # the dark dot at the effector
    moved = env.step(np.array([0.025, 0.025, 0.0, 0, 0, 0, 1.0])).observation.third_person
    row2, col2 = effector_pixel(*env.state.effector[:2])
    assert (row2, col2) != (row, col) and moved[row2, col2].max() < 60
    # the camera is fixed: far from the effector's path nothing changes
    assert np.array_equal(first[:20, :20], moved[:20, :20]) or np.array_equal(first[-20:, -20:], moved[-20:, -20:])
    closed = env.step(np.array([0, 0, 0, 0, 0, 0, 0.0])).observation.third_person
    assert not np.array_equal(closed, moved)  # the ring fills when the gripper closes
    other = make_episode(8, third_person=True).reset().third_person
    assert np.abs(other.astype(int) - first.astype(int)).mean() > 5  # another scene, another table


@pytest.mark.parametrize("value", [1, "yes", None])
def test_a_bad_third_person_flag_is_refused(value):
    with pytest.raises(ValueError, match="third_person"):
        make_episode(1, third_person=value)
