"""The 7-D OpenVLA action <-> MetaWorld's 4-D action, both ways, as pure functions (numpy only).

MetaWorld's action (4,) in [-1, 1]: ``a[0:3]`` moves the mocap target of the hand by ``a * action_scale`` metres
(``SawyerXYZEnv.set_xyz_action``: clipped to [-1, 1], ``action_scale`` 1/100 for every MT10 task), ``a[3]`` is the
gripper's position target (``do_simulation([a, -a])`` on the two finger joints): +1 closes, -1 opens (the hand is
reset with -1, open; the experts send +1 to hold a puck, -1 to keep the fingers apart; 0 and 0.6 occur in between).
MetaWorld has no rotation control (the hand's orientation is fixed).

    ====  ==========================  =====================  ===================================  ==============
    dim   OpenVLA action (7,)         unit                   MetaWorld action (4,)                clipped to
    ====  ==========================  =====================  ===================================  ==============
    0-2   dx, dy, dz: effector move   metres per step,       a[0:3] = d / ACTION_SCALE            d: +-0.01 m
                                      world frame            d = a[0:3] * ACTION_SCALE            a: [-1, 1]
    3-5   droll, dpitch, dyaw         radians per step       none: ignored; 0 from MetaWorld      -
    6     gripper                     1 = open, 0 = close    a[3] = 1 - 2 g  (g 1 -> -1 open,     g: [0, 1]
                                      (as spec.py)           g 0 -> +1 close); g = (1 - a[3]) / 2  a: [-1, 1]
    ====  ==========================  =====================  ===================================  ==============

The gripper maps affinely, not by a threshold: MetaWorld's gripper is a position target, and the experts use
in-between values (0: fingers half shut, 0.6), so ``g`` is continuous like the effort it comes from. Inside the
bounds the two functions invert each other exactly (up to float32 rounding); outside, they clip first.
"""

from __future__ import annotations

import numpy as np

ACTION_SCALE = 0.01     # metres of hand motion per unit of MetaWorld's xyz action (SawyerXYZEnv's action_scale)
ACTION_DIM, METAWORLD_ACTION_DIM = 7, 4


def to_metaworld(action: np.ndarray) -> np.ndarray:
    """OpenVLA action (..., 7) -> MetaWorld action (..., 4) float32, clipped to [-1, 1] (rotations dropped)."""
    action = np.asarray(action, dtype=np.float64)
    if action.shape[-1] != ACTION_DIM:
        raise ValueError(f"an OpenVLA action has {ACTION_DIM} values (dx dy dz droll dpitch dyaw gripper); "
                         f"got shape {action.shape}")
    xyz = action[..., :3] / ACTION_SCALE
    grip = 1.0 - 2.0 * action[..., 6:7]
    return np.clip(np.concatenate([xyz, grip], axis=-1), -1.0, 1.0).astype(np.float32)


def from_metaworld(action: np.ndarray) -> np.ndarray:
    """MetaWorld action (..., 4) -> OpenVLA action (..., 7) float32 (clipped to [-1, 1] first; rotations 0)."""
    action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
    if action.shape[-1] != METAWORLD_ACTION_DIM:
        raise ValueError(f"a MetaWorld action has {METAWORLD_ACTION_DIM} values (x y z gripper); got shape "
                         f"{action.shape}")
    out = np.zeros(action.shape[:-1] + (ACTION_DIM,), dtype=np.float64)
    out[..., :3] = action[..., :3] * ACTION_SCALE
    out[..., 6] = (1.0 - action[..., 3]) / 2.0
    return out.astype(np.float32)
