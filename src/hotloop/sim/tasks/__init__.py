"""The task registry: names to environment factories, imported only when a task is made.

`make_task("conveyor-pick", difficulty="hard")` builds an environment; an unknown task or difficulty is
answered with the known names (exit 2 at the CLI). Three kinds of task names:

- the built-in gantry tasks (`conveyor-pick`, `reach`);
- `gym:ENV_ID`: any registered gymnasium environment, keyword arguments from `--task-kwargs` (a JSON
  object), wrapped by `hotloop.sim.tasks.gym_task.GymTask`;
- a name from the `hotloop.tasks` entry-point group: a user's package declares, in its pyproject,
  `[project.entry-points."hotloop.tasks"] my-task = "my_pkg.tasks:make"`; `make(**task_kwargs)` returns
  either a gymnasium env (wrapped like `gym:`, with the `GymProfile` it carries as `hotloop_profile`)
  or an object with the task interface (`hotloop.sim.tasks.protocol.HotloopTask`). `make` is also
  given `task_name=` and `image_size=` when its signature names them. The contract: docs/tasks.md.

A plugin cannot take a built-in task's name: the built-in runs, and `check_task` (which `record` and
`eval` call first, once) warns, naming the plugin.
"""

from __future__ import annotations

import importlib
import sys
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
    return Registry.of("task", _BUILTIN)


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
    if name in registry:
        _warn_if_shadowed(name)
        return
    if name in plugin_tasks():
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
    if kwargs.get("render_mode") == "human":  # a window in a headless worker: the process aborts
        raise ConfigError(
            "--task-kwargs render_mode 'human' opens a window, which hotloop cannot show; drop it "
            "(hotloop renders its own views) or use 'rgb_array'"
        )
    if name.startswith(GYM_PREFIX):
        check_task(name)
        from hotloop.sim.tasks.gym_task import GymTask, check_seeding

        return check_seeding(GymTask.make(name[len(GYM_PREFIX) :], kwargs, image_size=image_size))
    if not builtin and name in plugin_tasks():
        return _make_plugin(name, kwargs, image_size)
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
    """The scripted expert of task `name`: a built-in's own, else the task's `make_expert()` (a
    `GymTask` asks its profile, then the env it wraps; see docs/tasks.md)."""
    if name in default_tasks() and getattr(env, "profile", None) is None:
        return _resolve(default_tasks().get(name).expert)(env)
    maker = getattr(env, "make_expert", None)
    expert = maker() if maker is not None else None
    if expert is None:
        raise ConfigError(
            f"task {name!r} has no scripted expert: give its env (or, for a gymnasium env, its "
            "hotloop_profile) a make_expert method returning an object with reset() and act(obs) "
            "(docs/tasks.md)"
        )
    return expert


def _warn_if_shadowed(name: str) -> None:
    """A plugin named like a built-in never runs: say so, by name, rather than run the built-in silently."""
    plugin = plugin_tasks().get(name)
    if plugin is not None:
        print(
            f"warning: the installed plugin task {name!r} ({plugin.value}) has the name of a built-in task "
            "and is ignored: the built-in runs; rename the plugin's hotloop.tasks entry point to use it",
            file=sys.stderr,
        )


def _make_plugin(name: str, kwargs: dict[str, Any], image_size: int | None) -> Any:
    """Load and call a plugin's `make`; whatever goes wrong is one line naming the plugin."""
    import inspect

    from hotloop.sim.tasks.protocol import check_task_object, is_task_object

    entry = plugin_tasks()[name]
    try:
        make = entry.load()
    except Exception as e:  # noqa: BLE001 - a broken plugin is the user's input, not our crash
        raise ConfigError(
            f"plugin task {name!r} ({entry.value}) cannot be imported: {_one_line(e)}"
        ) from None
    try:
        params = inspect.signature(make).parameters
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check or offer
        params = {}  # type: ignore[assignment]
    offered = {"task_name": name, "image_size": image_size or DEFAULT_IMAGE_SIZE}
    call = {k: v for k, v in offered.items() if k in params and k not in kwargs} | kwargs
    if kwargs and params:
        try:
            inspect.signature(make).bind(**call)
        except TypeError as e:
            raise ConfigError(f"--task-kwargs for plugin task {name!r} were not accepted: {e}") from None
    try:
        env = make(**call)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"plugin task {name!r}: its make() raised {_one_line(e)}") from None
    if env is None:
        raise ConfigError(
            f"plugin task {name!r}: its make() returned None; return a gymnasium env or an object with "
            "the task interface (docs/tasks.md)"
        )
    from hotloop.sim.tasks.gym_task import GymTask, check_seeding

    if is_task_object(env):
        return check_seeding(check_task_object(env, name))
    if not hasattr(env, "step") or not hasattr(env, "reset"):
        raise ConfigError(
            f"plugin task {name!r}: its make() returned a {type(env).__name__}, neither a gymnasium env nor "
            "an object with the task interface (docs/tasks.md)"
        )
    return check_seeding(GymTask.wrap(env, name, image_size=image_size))


DEFAULT_IMAGE_SIZE = 64  # what a plugin's make(image_size=) is told when no --image-size was given


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else "no message"
    return f"{text} ({type(e).__name__})"


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
