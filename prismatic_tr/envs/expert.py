"""The scripted expert: clipped proportional control toward the target on a 5 mm grid, lower near it, close.

Its action depends only on what the image and the instruction show: the effector's position (gripper and
shadow), the target's position (the object the instruction names) and the task kind (the instruction's
verb). Per step, with (ex, ey, ez) the effector and (tx, ty) the target::

    dx, dy  = q(clip(tx - ex, +-MAX_XY_STEP)), q(clip(ty - ey, +-MAX_XY_STEP))  # saturated far away
    dz      = q(clip(z_goal - ez, +-MAX_Z_STEP)),  z_goal = LOWER_Z if |t - e|_xy <= DESCEND_RADIUS else HOVER_Z
    q(v)    = MOVE_QUANTUM * round(v / MOVE_QUANTUM)                                   # 11 values per axis
    gripper = 0 (close) for "pick" when |t - e|_xy <= CLOSE_RADIUS and ez <= CLOSE_HEIGHT, else 1 (open)
    rotation = 0

Closing happens inside the grasp zone with margin (CLOSE_RADIUS < GRASP_RADIUS, CLOSE_HEIGHT < GRASP_HEIGHT);
a "reach" episode ends when the effector enters the zone on its way down.

Why the grid: a VLA names each action dimension with one of 256 bins (0.2 mm wide here). A continuous target
spreads the probability over dozens of neighbouring bins while the saturated +-MAX_XY_STEP moves sit in one,
so greedy decoding of a policy that is unsure picks a saturated move, and it oscillates (task version 1, see
``benchmarks/results/policy_training``). On a 5 mm grid every expert move is one of 11 bins per axis; the
grid costs the expert at most 2.5 mm per axis of final precision, inside CLOSE_RADIUS.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from prismatic_tr.envs.env import EnvState, TabletopEnv
from prismatic_tr.envs.spec import (
    ACTION_DIM,
    GRASP_HEIGHT,
    GRASP_RADIUS,
    GRIPPER_CLOSE,
    GRIPPER_OPEN,
    MAX_XY_STEP,
    MAX_Z_STEP,
)

HOVER_Z = 0.08          # travel height, metres
DESCEND_RADIUS = 0.05   # start lowering within this x-y distance of the target, metres
LOWER_Z = 0.015         # height to lower to, metres
CLOSE_RADIUS = 0.01     # close within this x-y distance ...
CLOSE_HEIGHT = 0.025    # ... and at most this high, metres
MOVE_QUANTUM = 0.005    # the grid of the expert's dx, dy, dz, metres
assert CLOSE_RADIUS < GRASP_RADIUS and LOWER_Z < CLOSE_HEIGHT < GRASP_HEIGHT
assert np.sqrt(2) * MOVE_QUANTUM / 2 < CLOSE_RADIUS and LOWER_Z + MOVE_QUANTUM / 2 < CLOSE_HEIGHT
assert (MAX_XY_STEP / MOVE_QUANTUM).is_integer() and (MAX_Z_STEP / MOVE_QUANTUM).is_integer()


def on_grid(value: float) -> float:
    """``value`` rounded to the nearest multiple of MOVE_QUANTUM."""
    return float(MOVE_QUANTUM * np.round(value / MOVE_QUANTUM))

# policy_fn(image (224, 224, 3) uint8, instruction) -> (7,) action
PolicyFn = Callable[[np.ndarray, str], np.ndarray]


class ScriptedExpert:
    """The expert controller; :meth:`act` maps a state to a float32 (7,) action (see the module docstring)."""

    def act(self, state: EnvState) -> np.ndarray:
        target = state.scene.target_object
        ex, ey, ez = state.effector
        ux, uy = target.x - ex, target.y - ey
        dist = float(np.hypot(ux, uy))
        z_goal = LOWER_Z if dist <= DESCEND_RADIUS else HOVER_Z
        action = np.zeros(ACTION_DIM, dtype=np.float32)
        action[0] = on_grid(np.clip(ux, -MAX_XY_STEP, MAX_XY_STEP))
        action[1] = on_grid(np.clip(uy, -MAX_XY_STEP, MAX_XY_STEP))
        action[2] = on_grid(np.clip(z_goal - ez, -MAX_Z_STEP, MAX_Z_STEP))
        closes = state.scene.kind == "pick" and dist <= CLOSE_RADIUS and ez <= CLOSE_HEIGHT
        action[6] = GRIPPER_CLOSE if closes else GRIPPER_OPEN
        return action

    def policy(self, env: TabletopEnv) -> PolicyFn:
        """A ``policy_fn(image, instruction)`` acting in ``env`` (it reads the state the image shows)."""

        def policy_fn(image: np.ndarray, instruction: str) -> np.ndarray:
            if instruction != env.instruction:
                raise ValueError(f"instruction {instruction!r} is not this episode's ({env.instruction!r})")
            return self.act(env.state)

        return policy_fn
