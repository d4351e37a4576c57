"""Scripted experts that read privileged simulator state and solve each task.

They act once per control period with the same action as a learned policy (an absolute end-effector
target plus grip), so their episodes are training data for it. The conveyor expert aims where the box
will be half a period ahead (a position-controlled gantry reaches its target in well under a period),
and acts on the current state alone (approach → descend → close → lift is read from the state), so a
policy can learn when to switch from what it observes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hotloop.sim.tasks.conveyor import BOX_HALF, ConveyorPickEnv
from hotloop.sim.tasks.gantry import BELT_TOP, GantryEnv
from hotloop.sim.tasks.reach import ReachEnv

MAX_STEP = 0.05  # metres per control period (0.5 m/s at 10 Hz): a smooth, learnable motion


def _step_toward(current: np.ndarray, target: np.ndarray, max_step: float) -> np.ndarray:
    delta = target - current
    dist = float(np.linalg.norm(delta))
    return target if dist <= max_step else current + delta * (max_step / dist)


class ConveyorExpert:
    """A feedback law on the current state (no hidden phase), so a policy that imitates it can recover
    from where it finds itself: track the box from above, descend along a funnel as the xy error
    shrinks, close when the fingers straddle the box, lift once they hold it, reopen if they closed
    on nothing."""

    hover_z = BELT_TOP + 0.09
    grasp_z = BELT_TOP + 0.03
    lift_z = BELT_TOP + 0.2

    def __init__(self, env: GantryEnv) -> None:
        if not isinstance(env, ConveyorPickEnv):
            raise TypeError("ConveyorExpert drives ConveyorPickEnv")
        self.env = env
        self.phase = "approach"

    def reset(self) -> None:
        self.phase = "approach"

    def act(self, obs: dict[str, Any] | None = None) -> np.ndarray:
        env = self.env
        period = 1.0 / env.config.control_hz
        ee = env.ee_pos()
        opening = env.grip_opening()
        box_now = env.box_pos()
        box = box_now + env.box_vel() * (0.5 * period)  # where the box is mid-way through the next period
        half = env.box_half()  # the simulator's truth: BOX_HALF unless `--perturb box-size` resized it
        grasp_z = self.grasp_z + (half - BOX_HALF)  # the same grip height on the box (exact when nominal)
        xy_err = float(np.linalg.norm(ee[:2] - box_now[:2]))
        holding = 2 * half - 0.004 < opening < 2 * half + 0.006 and box_now[2] > BELT_TOP + 0.01
        if holding or (opening < 2 * half + 0.006 and box_now[2] > BELT_TOP + half + 0.004):
            self.phase = "lift"
            target = np.array([ee[0], ee[1], min(self.lift_z, ee[2] + 0.04)])
            return np.array([*target, 1.0], dtype=np.float32)
        if opening < 2 * half - 0.004:  # closed on nothing: open and go round again
            self.phase = "reopen"
            target = np.array([box[0], box[1], min(self.hover_z, ee[2] + 0.03)])
            return np.array([*target, 0.0], dtype=np.float32)
        xy = _step_toward(ee[:2], box[:2], MAX_STEP)
        # Funnel: the height allowed shrinks with the xy error, so descent and alignment end together.
        z_goal = grasp_z + float(np.clip((xy_err - 0.008) * 2.0, 0.0, self.hover_z - grasp_z))
        z = max(z_goal, ee[2] - 0.035) if z_goal < ee[2] else min(z_goal, ee[2] + 0.04)
        low = ee[2] < grasp_z + 0.008 and xy_err < 0.012
        closing = opening < 0.078 and xy_err < 0.02 and ee[2] < grasp_z + 0.012
        grip = 1.0 if low or closing else 0.0
        self.phase = "close" if grip else ("descend" if z_goal < self.hover_z else "approach")
        return np.array([xy[0], xy[1], z, grip], dtype=np.float32)


class ReachExpert:
    def __init__(self, env: GantryEnv) -> None:
        if not isinstance(env, ReachEnv):
            raise TypeError("ReachExpert drives ReachEnv")
        self.env = env
        self.target: np.ndarray | None = None

    def reset(self) -> None:
        self.target = None

    def act(self, obs: dict[str, Any] | None = None) -> np.ndarray:
        prev = self.env.ee_pos() if self.target is None else self.target
        self.target = _step_toward(prev, self.env.goal(), MAX_STEP)
        return np.array([*self.target, 0.0], dtype=np.float32)
