"""A stand-in LeRobot `Robot` for the async-client tests (imported in .venv-lerobot only).

Fixed cameras (a deterministic pattern per camera name), joints that follow the actions (joint i reads
the last commanded action i; the joints past the action width stay at their start), and a log of every
observation taken and action sent. LeRobot's stock `RobotClient` builds it from its config by the usual
rule (`make_device_from_device_class`: `HotloopStandinConfig` -> `HotloopStandin` in this module).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from lerobot.robots.config import RobotConfig
from lerobot.robots.robot import Robot
from standin_frames import camera_image, parse_views


@RobotConfig.register_subclass("hotloop_standin")
@dataclass
class HotloopStandinConfig(RobotConfig):
    state_dim: int = 10
    action_dim: int = 4
    # name:HxW, comma separated (not `cameras`: RobotConfig reads that as camera configs)
    views: str = "top:96x128"
    send_s: float = 0.0  # how long a command takes to write (a real arm's serial bus: milliseconds)


class HotloopStandin(Robot):
    config_class = HotloopStandinConfig
    name = "hotloop_standin"

    def __init__(self, config: HotloopStandinConfig) -> None:
        super().__init__(config)
        self.config = config
        self.cameras = parse_views(config.views)
        self.frames = {n: camera_image(n, h, w) for n, (h, w) in self.cameras.items()}
        self.joints = np.zeros(config.state_dim, dtype=np.float64)
        self.connected = False
        self.sent: list[list[float]] = []
        self.observed = 0

    @cached_property
    def observation_features(self) -> dict[str, Any]:
        joints: dict[str, Any] = {f"j{i}.pos": float for i in range(self.config.state_dim)}
        return {**joints, **{n: (h, w, 3) for n, (h, w) in self.cameras.items()}}

    @cached_property
    def action_features(self) -> dict[str, Any]:
        return {f"j{i}.pos": float for i in range(self.config.action_dim)}

    @property
    def is_connected(self) -> bool:
        return self.connected

    def connect(self, calibrate: bool = True) -> None:
        self.connected = True

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass

    def get_observation(self) -> dict[str, Any]:
        self.observed += 1
        obs: dict[str, Any] = {f"j{i}.pos": float(v) for i, v in enumerate(self.joints)}
        obs.update({n: frame.copy() for n, frame in self.frames.items()})
        return obs

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        values = [float(action[f"j{i}.pos"]) for i in range(self.config.action_dim)]
        if self.config.send_s:
            time.sleep(self.config.send_s)
        self.sent.append(values)
        self.joints[: len(values)] = values
        return action

    def disconnect(self) -> None:
        self.connected = False
