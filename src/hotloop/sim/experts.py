"""Scripted experts that read privileged simulator state and solve each task.

They act once per control period with the same action as a learned policy (an absolute end-effector
target plus grip), so their episodes are training data for it. The conveyor expert aims where the box
will be half a period ahead (a position-controlled gantry reaches its target in well under a period),
and walks through approach → descend → close → lift, each phase readable from the state, so a policy can
learn when to switch from what it observes.
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
    hover_z = BELT_TOP + 0.09
    grasp_z = BELT_TOP + 0.03
    lift_z = BELT_TOP + 0.2

    def __init__(self, env: GantryEnv) -> None:
        if not isinstance(env, ConveyorPickEnv):
            raise TypeError("ConveyorExpert drives ConveyorPickEnv")
        self.env = env
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self.closed_steps = 0
        self.target: np.ndarray | None = None

    def act(self, obs: dict[str, Any] | None = None) -> np.ndarray:
        env = self.env
        period = 1.0 / env.config.control_hz
        ee = env.ee_pos()
        box = env.box_pos() + env.box_vel() * (0.5 * period)
        prev = ee if self.target is None else self.target
        xy_err = float(np.linalg.norm(ee[:2] - env.box_pos()[:2]))
        if self.phase == "approach" and xy_err < 0.015 and abs(ee[2] - self.hover_z) < 0.02:
            self.phase = "descend"
        if self.phase == "descend" and ee[2] < self.grasp_z + 0.006:
            self.phase = "close"
        if self.phase == "close" and (self.closed_steps >= 3 or env.grip_opening() < 2 * BOX_HALF + 0.004):
            self.phase = "lift"

        grip = 0.0
        if self.phase == "approach":
            goal = np.array([box[0], box[1], self.hover_z])
            # Move in xy first at full speed, settle height on the way.
            target = _step_toward(prev, goal, MAX_STEP)
        elif self.phase == "descend":
            target = np.array([box[0], box[1], max(self.grasp_z, prev[2] - 0.035)])
        elif self.phase == "close":
            grip = 1.0
            self.closed_steps += 1
            target = np.array([box[0], box[1], self.grasp_z])
        else:
            grip = 1.0
            target = np.array([prev[0], prev[1], min(self.lift_z, prev[2] + 0.04)])
        self.target = target
        return np.array([*target, grip], dtype=np.float32)


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
