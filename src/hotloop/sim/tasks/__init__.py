"""The task registry: names to environment factories, imported only when a task is made.

`make_task("conveyor-pick", difficulty="hard")` builds an environment; an unknown task or difficulty is
answered with the known names (exit 2 at the CLI). Three kinds of task names:

- the built-in gantry tasks (`conveyor-pick`, `reach`);
- `gym:ENV_ID`: any registered gymnasium environment, keyword arguments from `--task-kwargs` (a JSON
  object), wrapped by `hotloop.sim.tasks.gym_task.GymTask`;
- a name from the `hotloop.tasks` entry-point group: a user's package declares, in its pyproject,
  `[project.entry-points."hotloop.tasks"] my-task = "my_pkg.tasks:make"`; `make(**task_kwargs)` returns
  either a gymnasium env (wrapped like `gym:`) or an object with the task interface of `GymTask`.
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


ENTRY_POINT_GROUP = "hotloop.tasks"
GYM_PREFIX = "gym:"


def plugin_tasks() -> dict[str, Any]:
    """Installed `hotloop.tasks` entry points by name (not loaded)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def check_task(name: str) -> None:
    """Raise the CLI's one-line error if `name` is no task (cheap: builds nothing)."""
    if name.startswith(GYM_PREFIX):
        if not name[len(GYM_PREFIX) :].strip():
            raise ConfigError("--task gym: needs an environment id, e.g. gym:FetchReach-v4")
        from hotloop.sim.tasks.gym_task import env_spec

        env_spec(name[len(GYM_PREFIX) :])  # an unknown id fails here, before any worker starts
        return
    registry = default_tasks()
    if name in registry or name in plugin_tasks():
        return
    plugins = sorted(plugin_tasks())
    extra = f" Plugins ({ENTRY_POINT_GROUP}): {', '.join(plugins)}." if plugins else ""
    from hotloop.errors import UnknownNameError

    raise UnknownNameError(f"{registry.unknown_message(name)}.{extra} Or gym:ENV_ID for a gymnasium env.")


def make_task(
    name: str,
    difficulty: str | None = None,
    image_size: int | None = None,
    task_kwargs: str | dict[str, Any] | None = None,
    views: tuple[str, ...] | None = None,
) -> Any:
    """Build the environment for task `name` (a `GantryEnv`, or a `GymTask` for gym: and plugins).
    `views`: the camera views a built-in (gantry) task renders, e.g. ("top", "wrist")."""
    import dataclasses

    from hotloop.sim.tasks.gym_task import parse_task_kwargs

    kwargs = task_kwargs if isinstance(task_kwargs, dict) else parse_task_kwargs(task_kwargs)
    builtin = name in default_tasks()
    if difficulty is not None and not builtin:
        raise ConfigError(f"task {name!r} has no difficulty levels; drop --difficulty")
    if name.startswith(GYM_PREFIX):
        check_task(name)
        from hotloop.sim.tasks.gym_task import GymTask

        return GymTask.make(name[len(GYM_PREFIX) :], kwargs, image_size=image_size)
    if not builtin and name in plugin_tasks():
        try:
            env = plugin_tasks()[name].load()(**kwargs)
        except TypeError as e:
            raise ConfigError(f"--task-kwargs for plugin task {name!r} were not accepted: {e}") from None
        if hasattr(env, "advance") and hasattr(env, "task_spec"):
            return env
        from hotloop.sim.tasks.gym_task import GymTask

        return GymTask.wrap(env, name, image_size=image_size)
    if views is not None and not builtin:
        raise ConfigError(f"task {name!r} renders its own views; choosing views is for the built-in tasks")
    if kwargs:
        raise ConfigError(f"task {name!r} takes no --task-kwargs (gym: and plugin tasks do)")
    entry = default_tasks().get(name)
    config_cls = _resolve(entry.config)
    config = config_cls()
    if difficulty is not None:
        if not entry.difficulties:
            raise ConfigError(f"task {name!r} has no difficulty levels; drop --difficulty")
        config = dataclasses.replace(config, difficulty=difficulty)
    if image_size is not None:
        config = dataclasses.replace(config, gantry=dataclasses.replace(config.gantry, image_size=image_size))
    if views is not None:
        config = dataclasses.replace(config, gantry=dataclasses.replace(config.gantry, views=tuple(views)))
    return _resolve(entry.env)(config)


def make_expert(name: str, env: Any) -> Any:
    profile = getattr(env, "profile", None)
    if profile is not None:  # a GymTask: its profile names the expert, if hotloop has one
        if not profile.expert:
            raise ConfigError(f"task {name!r} has no scripted expert in hotloop; record one of your own")
        return _resolve(profile.expert)(env)
    if name not in default_tasks():
        expert = getattr(env, "make_expert", None)
        if expert is None:
            raise ConfigError(f"task {name!r} has no scripted expert (its env has no make_expert())")
        return expert()
    return _resolve(default_tasks().get(name).expert)(env)


def check_difficulty(task: str, difficulty: str | None) -> None:
    """`--difficulty` checked against the task's levels now, not in a worker after start-up."""
    from hotloop.errors import ConfigError

    registry = default_tasks()
    if difficulty is None or task not in registry:  # other tasks check their own options when made
        return
    levels = registry.get(task).difficulties
    if not levels:
        raise ConfigError(f"task {task!r} has no difficulty levels; drop --difficulty")
    if difficulty not in levels:
        raise ConfigError(f"--difficulty {difficulty!r} is not a level of {task}; use {', '.join(levels)}")
