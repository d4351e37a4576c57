"""LeRobot's three async-inference dataclasses as LeRobot 0.4.4 defines them, registered under LeRobot's
module name for one test (`install`), so that the main venv can pickle what the stock client pickles
and load what the server replies without LeRobot installed."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

MODULE = "lerobot.async_inference.helpers"


@dataclass
class TimedData:
    timestamp: float
    timestep: int

    def get_timestamp(self) -> float:
        return self.timestamp

    def get_timestep(self) -> int:
        return self.timestep


@dataclass
class TimedAction(TimedData):
    action: Any

    def get_action(self) -> Any:
        return self.action


@dataclass
class TimedObservation(TimedData):
    observation: dict[str, Any]
    must_go: bool = False


@dataclass
class RemotePolicyConfig:
    policy_type: str
    pretrained_name_or_path: str
    lerobot_features: dict[str, Any]
    actions_per_chunk: int
    device: str = "cpu"
    rename_map: dict[str, str] = field(default_factory=dict)


def install(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType(MODULE)
    for cls in (TimedAction, TimedObservation, RemotePolicyConfig):
        cls.__module__ = MODULE
        setattr(module, cls.__name__, cls)
    for name in ("lerobot", "lerobot.async_inference"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, MODULE, module)
    return module
