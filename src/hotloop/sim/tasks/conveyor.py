"""`conveyor-pick`: a box rides a belt through the workspace; grasp it and lift it before it leaves.

The belt moves along +x at a speed drawn per episode from the difficulty's range. The box starts
upstream at a random x and y. Success: the box's bottom is `lift_height` above the belt while both fingers
touch it (held, not batted: a gripper that strikes the box can throw it that high, and a random policy
then "succeeded"). Failure: the box passes `exit_x` (it left the workspace), falls off the belt, or the
time limit passes.

Latency matters here because the box keeps moving while the policy thinks: a plan made on an observation
that is L seconds old is off by `speed * L` along the belt, and the fingers close along the belt axis,
so that offset is exactly what the grasp cannot tolerate beyond about 2 cm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.sim.tasks.gantry import BELT_TOP, GantryConfig, GantryEnv

BOX_HALF = 0.02  # a 4 cm box in an 8 cm gap: ±2 cm of grasp tolerance along the belt
DIFFICULTY_SPEEDS = {  # belt speed range (m/s) per difficulty
    "easy": (0.04, 0.07),
    "medium": (0.09, 0.13),
    "hard": (0.14, 0.18),
}


@dataclass(frozen=True)
class ConveyorConfig:
    gantry: GantryConfig = field(default_factory=GantryConfig)
    difficulty: str = "medium"
    start_x: tuple[float, float] = (-0.40, -0.30)
    start_y: tuple[float, float] = (-0.06, 0.06)
    exit_x: float = 0.42
    lift_height: float = 0.06

    def __post_init__(self) -> None:
        if self.difficulty not in DIFFICULTY_SPEEDS:
            raise ConfigError(
                f"difficulty {self.difficulty!r} is not known; use one of {', '.join(DIFFICULTY_SPEEDS)}"
            )

    @property
    def speed_range(self) -> tuple[float, float]:
        return DIFFICULTY_SPEEDS[self.difficulty]


class ConveyorPickEnv(GantryEnv):
    task_name = "conveyor-pick"
    prompt = "pick up the box from the moving belt"
    has_belt = True

    def __init__(self, config: ConveyorConfig | None = None) -> None:
        self.task_config = config or ConveyorConfig()
        self.belt_speed = 0.0
        super().__init__(self.task_config.gantry)
        self._belt_dof = self.model.joint("belt").dofadr[0]
        self._box_qpos = self.model.joint("box").qposadr[0]
        self._box_dof = self.model.joint("box").dofadr[0]
        self._box_body = self.model.body("box").id
        self._box_geom = self.model.geom("box").id
        self._finger_geoms = (self.model.geom("finger_l").id, self.model.geom("finger_r").id)

    def _extra_xml(self) -> str:
        return f"""
    <body name="box" pos="0 0 {BELT_TOP + BOX_HALF}">
      <freejoint name="box"/>
      <geom name="box" type="box" size="{BOX_HALF} {BOX_HALF} {BOX_HALF}" mass="0.1" rgba="0.1 0.6 0.9 1"
            friction="1.2 0.01 0.001"/>
    </body>"""

    def _randomize(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        cfg = self.task_config
        self.belt_speed = float(rng.uniform(*cfg.speed_range))
        x = rng.uniform(*cfg.start_x)
        y = rng.uniform(*cfg.start_y)
        if "box_x" in options:  # a recovery start: the box already part-way along the belt
            x = float(options["box_x"])
            if not cfg.start_x[0] <= x < cfg.exit_x:
                raise ConfigError(f"box_x must be in [{cfg.start_x[0]}, {cfg.exit_x}) (got {x})")
        self.data.qpos[self._box_qpos : self._box_qpos + 7] = [x, y, BELT_TOP + self.box_half(), 1, 0, 0, 0]
        self.data.qvel[self._box_dof] = self.belt_speed  # already riding the belt
        self.data.qvel[self._belt_dof] = self.belt_speed

    def _before_tick(self) -> None:
        # The belt is a driven surface: its speed is imposed, friction carries the box.
        self.data.qvel[self._belt_dof] = self.belt_speed

    def box_half(self) -> float:
        """The box's half size (m): BOX_HALF, unless a perturbation (`box-size`) resized it."""
        return float(self.model.geom_size[self._box_geom][2])

    def box_pos(self) -> np.ndarray:
        return self.data.xpos[self._box_body].copy()

    def box_vel(self) -> np.ndarray:
        return self.data.qvel[self._box_dof : self._box_dof + 3].copy()

    def _target_state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.box_pos(), self.box_vel()

    def _outcome(self) -> tuple[bool, bool]:
        pos = self.data.xpos[self._box_body]
        lifted = pos[2] - self.box_half() > BELT_TOP + self.task_config.lift_height and self._held()
        failed = pos[0] > self.task_config.exit_x or pos[2] < BELT_TOP - 0.05 or abs(pos[1]) > 0.16
        return bool(lifted), bool(failed and not lifted)

    def _held(self) -> bool:
        """Both fingers in contact with the box now."""
        touching: set[int] = set()
        for contact in self.data.contact[: self.data.ncon]:
            pair = (int(contact.geom1), int(contact.geom2))
            if self._box_geom in pair:
                touching.update(pair)
        return all(g in touching for g in self._finger_geoms)

    def info(self) -> dict:
        return {"time_s": self.time_s, "belt_speed": self.belt_speed}
