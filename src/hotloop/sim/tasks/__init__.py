"""The task registry: names to environment factories, imported only when a task is made.

`make_task("conveyor-pick", difficulty="hard")` builds an environment; an unknown task or difficulty is
answered with the known names (exit 2 at the CLI).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from hotloop.errors import ConfigError
from hotloop.registry import Registry


@dataclass(frozen=True)
class TaskEntry:
    description: str
    env: str  # "module:Class" of the environment
    config: str  # "module:Class" of its frozen config
    difficulties: tuple[str, ...] = ()
    expert: str = ""  # "module:Class" of its scripted expert


_BUILTIN: tuple[tuple[str, TaskEntry], ...] = (
    (
        "conveyor-pick",
        TaskEntry(
            "grasp a box riding a belt and lift it before it leaves the workspace (latency matters)",
            "hotloop.sim.tasks.conveyor:ConveyorPickEnv",
            "hotloop.sim.tasks.conveyor:ConveyorConfig",
            ("easy", "medium", "hard"),
            "hotloop.sim.experts:ConveyorExpert",
        ),
    ),
    (
        "reach",
        TaskEntry(
            "move the gripper to a static goal (the control: latency only slows it down)",
            "hotloop.sim.tasks.reach:ReachEnv",
            "hotloop.sim.tasks.reach:ReachConfig",
            (),
            "hotloop.sim.experts:ReachExpert",
        ),
    ),
)


def default_tasks() -> Registry[TaskEntry]:
    registry: Registry[TaskEntry] = Registry("task")
    for name, entry in _BUILTIN:
        registry.register(name, entry)
    return registry


def _resolve(path: str) -> Any:
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


def make_task(name: str, difficulty: str | None = None, image_size: int | None = None) -> Any:
    """Build the environment for task `name` (a `GantryEnv`)."""
    import dataclasses

    entry = default_tasks().get(name)
    config_cls = _resolve(entry.config)
    config = config_cls()
    if difficulty is not None:
        if not entry.difficulties:
            raise ConfigError(f"task {name!r} has no difficulty levels; drop --difficulty")
        config = dataclasses.replace(config, difficulty=difficulty)
    if image_size is not None:
        config = dataclasses.replace(config, gantry=dataclasses.replace(config.gantry, image_size=image_size))
    return _resolve(entry.env)(config)


def make_expert(name: str, env: Any) -> Any:
    return _resolve(default_tasks().get(name).expert)(env)
