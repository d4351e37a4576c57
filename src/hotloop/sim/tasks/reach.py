"""`reach`: the static control task. Bring the gripper to a marked goal and stay there.

Nothing moves but the robot, so a stale observation is still a true one: latency only slows the episode
down. It is the control beside `conveyor-pick`, where a stale observation is a wrong one.
Success: the end effector is within `tolerance` of the goal for `dwell_s` in a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hotloop.sim.tasks.gantry import BELT_TOP, GantryConfig, GantryEnv


@dataclass(frozen=True)
class ReachConfig:
    gantry: GantryConfig = field(default_factory=lambda: GantryConfig(time_limit_s=5.0))
    tolerance: float = 0.015
    dwell_s: float = 0.2


class ReachEnv(GantryEnv):
    task_name = "reach"
    prompt = "move the gripper to the red ball"
    has_belt = False

    def __init__(self, config: ReachConfig | None = None) -> None:
        self.task_config = config or ReachConfig()
        super().__init__(self.task_config.gantry)
        self._goal_mocap = self.model.body("goal").mocapid[0]
        self._dwell_ticks = 0

    def _extra_xml(self) -> str:
        return """
    <body name="goal" mocap="true" pos="0 0 0.15">
      <geom type="sphere" size="0.015" rgba="0.9 0.1 0.1 0.8" contype="0" conaffinity="0"/>
    </body>"""

    def _randomize(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        goal = [rng.uniform(-0.3, 0.3), rng.uniform(-0.1, 0.1), rng.uniform(BELT_TOP + 0.05, 0.25)]
        self.data.mocap_pos[self._goal_mocap] = goal
        self._dwell_ticks = 0

    def goal(self) -> np.ndarray:
        return self.data.mocap_pos[self._goal_mocap].copy()

    def _target_state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.goal(), np.zeros(3)

    def _before_tick(self) -> None:
        near = np.linalg.norm(self.ee_pos() - self.goal()) < self.task_config.tolerance
        self._dwell_ticks = self._dwell_ticks + 1 if near else 0

    def _outcome(self) -> tuple[bool, bool]:
        return self._dwell_ticks * self.config.physics_dt >= self.task_config.dwell_s, False
