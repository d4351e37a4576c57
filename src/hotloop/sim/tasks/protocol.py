"""The task interface: what `hotloop eval` and `hotloop record` call on a task, version 1.

A `hotloop.tasks` plugin's `make()` returns either a gymnasium env (hotloop wraps it in `GymTask`, with
the `GymProfile` the env carries as `env.hotloop_profile`, see docs/tasks.md) or an object with every
member of `HotloopTask` below. The built-in tasks and `GymTask` are such objects. An object is checked
once, when it is made (`check_task_object`): a missing member is a one-line error naming it, not an
AttributeError in the middle of an episode.

The version is `TASK_PROTOCOL_VERSION`; an object may say which one it was written for in
`hotloop_task_protocol` (an int, default 1). A later version adds members with defaults, so an object
written for version 1 keeps working; an object that needs a newer version than this hotloop has is
refused by name.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from hotloop.errors import ConfigError

TASK_PROTOCOL_VERSION = 1


class TaskFault(RuntimeError):
    """The task itself went wrong (a non-finite observation): its episode is an error (a crash, counted
    apart, exit 1), never a policy failure. Not a HotloopError: the other episodes still run."""


def check_observation(obs: dict[str, Any], task_name: str, tick: int) -> dict[str, Any]:
    """`obs`, when its state is finite; else the `TaskFault` naming the entries."""
    state = np.asarray(obs.get("state", ()), dtype=np.float64)
    if not np.all(np.isfinite(state)):
        bad = [int(i) for i in np.flatnonzero(~np.isfinite(state.reshape(-1)))[:5]]
        raise TaskFault(
            f"{task_name} returned a non-finite observation at tick {tick} (state entries {bad}): a fault "
            "of the task, not of the policy"
        )
    return obs


class TaskConfig(Protocol):
    """The clock of a task (`task.config`): read by the evaluator and the recorder."""

    physics_dt: float  # seconds per tick (the evaluator's clock, and how latency is rounded)
    time_limit_s: float  # an episode's length; the episode ends there as timed out
    ticks_per_control: int  # ticks per control period (the policy acts once per period)
    image_size: int  # the side of the rendered views, in pixels

    @property
    def control_hz(self) -> float: ...  # 1 / (physics_dt * ticks_per_control)


@runtime_checkable
class HotloopTask(Protocol):
    """Everything the evaluator and the recorder use, in the order an episode uses it.

    Actions are *absolute targets* (`action_space.shape[0]` numbers within its bounds), held tick after
    tick while the policy thinks: a task whose native actions are deltas or velocities turns the held
    target into its native action every tick (`GymProfile.native_action`).
    """

    task_name: str  # the name it was made under (the `--task`)
    prompt: str  # the language instruction of the task ("" when none)
    config: TaskConfig
    action_space: Any  # a gymnasium Box: shape (action_dim,), low/high = the bounds actions are clipped to
    tick: int  # ticks since the last reset

    @property
    def task_spec(self) -> Any:
        """A `hotloop.policy_spec.TaskSpec`: views, state and action names, bounds, rate, unit."""
        ...

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Start the episode of `seed` (the same seed must give the same start: checked at start-up);
        returns (observation, info)."""
        ...

    def observe(self, render: bool = True) -> dict[str, Any]:
        """{"state": float array, "prompt": str, "images": {view: (H, W, 3) uint8}}; `render=False` leaves
        the images out (a policy that reads only the state never pays for rendering)."""
        ...

    def advance(self, action: np.ndarray, ticks: int) -> tuple[bool, bool]:
        """Hold `action` (clipped to `action_space`) for up to `ticks` ticks; returns (success, failed) and
        stops early when either is True or the episode is over (never steps past its end)."""
        ...

    def hold_action(self) -> np.ndarray:
        """The target being held (clipped): what the task keeps doing while told nothing new."""
        ...

    def ee_pos(self) -> np.ndarray | None:
        """The end-effector position (for the jerk metric), or None where none is known."""
        ...

    @property
    def time_s(self) -> float: ...  # simulated seconds since the reset

    @property
    def timed_out(self) -> bool: ...  # True once the episode is over without success or failure

    def info(self) -> dict[str, Any]:
        """JSON-ready facts about the episode so far (recorded per episode)."""
        ...

    def close(self) -> None: ...


def start_digest(obs: dict[str, Any]) -> str:
    """A short fingerprint of an episode's first state: two seeds with one digest are the same start."""
    import hashlib

    state = np.ascontiguousarray(np.asarray(obs.get("state", ()), dtype=np.float64))
    return hashlib.sha1(state.tobytes()).hexdigest()[:16]


# Optional members, with what hotloop does without them:
OPTIONAL_MEMBERS = {
    "make_expert": "no scripted expert: `hotloop record` and `expert:scripted` refuse the task",
    "raw_observation": "experts of their own read whatever they need; hotloop's own experts need it",
    "set_views": "no views rendered only on request (the gantry's wrist camera)",
    "hotloop_task_protocol": "taken as version 1",
}

_REQUIRED = (
    "task_name",
    "prompt",
    "config",
    "action_space",
    "tick",
    "task_spec",
    "reset",
    "observe",
    "advance",
    "hold_action",
    "ee_pos",
    "time_s",
    "timed_out",
    "info",
    "close",
)
_CONFIG_FIELDS = ("physics_dt", "time_limit_s", "ticks_per_control", "image_size", "control_hz")


def is_task_object(obj: Any) -> bool:
    """True for an object that means to be a task (rather than a gymnasium env to wrap)."""
    return hasattr(obj, "advance") and hasattr(obj, "task_spec")


def check_task_object(obj: Any, name: str) -> Any:
    """`obj` if it has every member `HotloopTask` needs, else the one-line error naming what is missing."""
    version = getattr(obj, "hotloop_task_protocol", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError(
            f"task {name!r}: hotloop_task_protocol must be a version number >= 1 (got {version!r})"
        )
    if version > TASK_PROTOCOL_VERSION:
        raise ConfigError(
            f"task {name!r} was written for task protocol {version}; this hotloop has version "
            f"{TASK_PROTOCOL_VERSION}: upgrade hotloop"
        )
    missing = [m for m in _REQUIRED if not hasattr(obj, m)]
    config = getattr(obj, "config", None)
    if config is not None:
        missing += [f"config.{f}" for f in _CONFIG_FIELDS if not hasattr(config, f)]
    space = getattr(obj, "action_space", None)
    if space is not None and not (
        hasattr(space, "low") and hasattr(space, "high") and hasattr(space, "shape")
    ):
        missing.append("action_space.low/high/shape (a gymnasium Box)")
    if missing:
        raise ConfigError(
            f"task {name!r} ({type(obj).__name__}) lacks {', '.join(missing)} of the task interface "
            "(hotloop.sim.tasks.protocol.HotloopTask, docs/tasks.md)"
        )
    return obj
