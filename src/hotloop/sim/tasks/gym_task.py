"""`gym:ENV_ID`: any gymnasium environment as a hotloop task.

The evaluator's clock is the environment's: one tick is one native `env.step` (`physics_dt` = the
env's `dt`), and the policy's action is an absolute target, held tick after tick while the policy
thinks. Where the env takes deltas (Fetch moves its gripper by `0.05 * action` per step), the held
target is turned into that step's delta from the current end-effector position, every tick, so holding
means staying put rather than drifting. Success is the env's own `info["is_success"]` (or
`info["success"]`); an episode ends on success, on `terminated` without it (a failure) or at the time
limit (`max_episode_steps`). `reset(seed=s)` seeds the env's own generator explicitly, so episode `s`
is the same start everywhere.

What is known about an env family (its state layout, end effector, delta scale, cameras, prompt,
scripted expert) lives in `gym_profiles.py`; a plugin's env may carry its own (`env.hotloop_profile`).
An env without a profile runs with its flattened observation as the state, its native action as the
(absolute) action, and the images of its own MuJoCo model when it has one; a one-line note says so.

The env must have a continuous (Box) action space and a time limit; an episode ends at `truncated`
too (the env is never stepped past it), and a non-finite observation is a fault of the task
(`TaskFault`: the episode is an error, not a policy failure).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.sim.tasks.gym_profiles import GENERIC_ASSUMPTIONS, GymProfile, profile_for
from hotloop.sim.tasks.protocol import TaskFault, check_observation


@dataclass(frozen=True)
class GymTaskConfig:
    """The clock and views of a wrapped env (the attributes the evaluator and recorder read)."""

    physics_dt: float  # seconds per native step
    time_limit_s: float
    image_size: int = 64
    ticks_per_control: int = 1  # the policy acts every native step

    @property
    def control_hz(self) -> float:
        return 1.0 / (self.physics_dt * self.ticks_per_control)


def parse_task_kwargs(text: str | None) -> dict[str, Any]:
    """`--task-kwargs` JSON object -> dict; anything else is a one-line ConfigError."""
    if text is None or text == "":
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"--task-kwargs {text!r} is not JSON ({e.msg}); write an object, e.g. '{{\"max_episode_steps\": 100}}'"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"--task-kwargs must be a JSON object of keyword arguments (got {type(value).__name__})"
        )
    return value


def env_spec(env_id: str, profile: GymProfile | None = None) -> Any:
    """The registered EnvSpec of `env_id` (after the profile's package registered its envs), or the
    one-line ConfigError; cheap enough to check a --task before any worker starts."""
    import gymnasium as gym

    (profile or profile_for(env_id)).register()
    try:
        return gym.spec(env_id)
    except gym.error.Error as e:
        raise ConfigError(f"--task gym:{env_id}: {e}") from None


def _make_env(env_id: str, kwargs: dict[str, Any], profile: GymProfile, user_kwargs: bool = True) -> Any:
    """gym.make with the profile's registration and spec fix-ups; kwargs already merged."""
    import gymnasium as gym

    spec = profile.patch_spec(env_spec(env_id, profile))
    steps = kwargs.get("max_episode_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError(f"--task-kwargs max_episode_steps must be an integer >= 1 (got {steps!r})")
    try:
        return gym.make(spec, **kwargs)
    except TypeError as e:
        if user_kwargs:
            raise ConfigError(f"--task-kwargs for gym:{env_id} were not accepted: {e}") from None
        raise ConfigError(f"gym:{env_id} cannot be made: {e} (TypeError)") from None
    except Exception as e:  # noqa: BLE001 - the env's constructor: its message, in one line
        text = str(e).strip().splitlines()[0] if str(e).strip() else "no message"
        raise ConfigError(f"gym:{env_id} cannot be made: {text} ({type(e).__name__})") from None


def _max_episode_steps(env: Any) -> int | None:
    """The time limit: the spec's, or that of a TimeLimit wrapper on an unregistered env."""
    import gymnasium as gym

    if env.spec is not None and env.spec.max_episode_steps:
        return int(env.spec.max_episode_steps)
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return int(env._max_episode_steps)
        env = env.env
    return None


class GymTask:
    """A gymnasium env behind the evaluator's task interface (see module docstring)."""

    def __init__(self, env: Any, task_name: str, profile: GymProfile, image_size: int | None = None) -> None:
        """Wrap a made env (use `make` for an env id, `wrap` for a plugin's env)."""
        import gymnasium as gym

        self.env = env
        self.task_name = task_name
        self.profile = profile
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(
                f"{task_name} has a {type(space).__name__} action space {space}; hotloop's policies output "
                "continuous targets (a one-dimensional gymnasium Box), so it cannot run this env"
            )
        # Nothing is known of this env: what is assumed, said once by the command that runs it (`record`,
        # or eval's driver from its workers' run info), not by every worker that builds the task.
        self.profile_note = (
            f"note: {task_name} has no hotloop profile; {GENERIC_ASSUMPTIONS}"
            if type(profile) is GymProfile
            else None
        )
        size = image_size or profile.image_size
        dt = self.profile.step_dt(self.env)
        steps = _max_episode_steps(self.env)
        if not steps:
            raise ConfigError(
                f"{task_name} has no time limit; pass --task-kwargs '{{\"max_episode_steps\": N}}' "
                "(a plugin: wrap its env in gymnasium.wrappers.TimeLimit)"
            )
        self.config = GymTaskConfig(dt, steps * dt, size)
        self.prompt = self.profile.prompt
        self.tick = 0
        self._obs: Any = None
        self._info: dict[str, Any] = {}
        self._success = self._failed = self._truncated = False
        self._success_reported = False  # whether this episode's env said success under a key we read
        self._views = self.profile.views(self.env, self.config.image_size)
        obs, info = self.env.reset(seed=0)  # learn the state size and image shapes once
        self._obs, self._info = obs, info
        self._state_dim = len(self.profile.state(obs, self.env))
        self._image_shapes = {k: v.shape for k, v in self._render().items()}
        self._hold = self.profile.initial_target(self._obs, self.env)
        low, high = self.profile.action_bounds(self.env)
        self.action_space = gym.spaces.Box(low, high, dtype=np.float32)

    @classmethod
    def make(
        cls, env_id: str, kwargs: dict[str, Any] | None = None, image_size: int | None = None
    ) -> GymTask:
        if image_size is not None and not 16 <= image_size <= 512:
            raise ConfigError(f"image size must be in [16, 512] (got {image_size})")
        profile = profile_for(env_id)
        size = image_size or profile.image_size
        env = _make_env(env_id, {**profile.default_kwargs(size), **dict(kwargs or {})}, profile, bool(kwargs))
        return cls(env, f"gym:{env_id}", profile, size)

    @classmethod
    def wrap(cls, env: Any, task_name: str, image_size: int | None = None) -> GymTask:
        """A plugin's gymnasium env, with the profile it carries (`env.hotloop_profile`, on the env or any
        wrapper of it), else the profile of its id when hotloop has one."""
        if image_size is not None and not 16 <= image_size <= 512:
            raise ConfigError(f"image size must be in [16, 512] (got {image_size})")
        profile = attached_profile(env)
        if profile is None:
            env_id = env.spec.id if getattr(env, "spec", None) is not None else task_name
            profile = profile_for(env_id)
        return cls(env, task_name, profile, image_size)

    # --- the task interface ----------------------------------------------------------------------
    @property
    def task_spec(self) -> Any:
        from hotloop.policy_spec import ImageSpec, TaskSpec

        low, high = self.profile.action_bounds(self.env)
        return TaskSpec(
            name=self.task_name,
            images=tuple(ImageSpec(k, s[0], s[1]) for k, s in self._image_shapes.items()),
            state_names=tuple(self.profile.state_names(self._state_dim)),
            action_names=tuple(self.profile.action_names(self.env)),
            ee_state=self.profile.ee_state if len(self.profile.ee_state) == 3 else (),
            action_low=tuple(float(v) for v in low),
            action_high=tuple(float(v) for v in high),
            prompt=self.prompt,
            fps=self.config.control_hz,
            robot_type=self.task_name,
            length_unit=self.profile.length_unit,
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is None:
            raise ConfigError("gym tasks are reset with an explicit seed (episode seeds come from --seed)")
        self._obs, self._info = self.env.reset(seed=int(seed), options=options)
        self.env.action_space.seed(int(seed))
        self.tick = 0
        self._success = self._failed = self._truncated = False
        self._success_reported = False
        self._hold = self.profile.initial_target(self._obs, self.env)
        self._check_finite()
        return self.observe(), self.info()

    def advance(self, action: np.ndarray, ticks: int) -> tuple[bool, bool]:
        """Hold the absolute target `action` for `ticks` native steps; stops at success or failure."""
        target = np.asarray(action, dtype=np.float64).reshape(-1)
        if target.shape != self.action_space.shape:
            raise ConfigError(
                f"action must have shape {self.action_space.shape} = {self.profile.action_names(self.env)} "
                f"(got {target.shape})"
            )
        if not np.all(np.isfinite(target)):
            raise ConfigError(f"action must be finite (got {target.tolist()})")
        self._hold = np.clip(target, self.action_space.low, self.action_space.high)
        for _ in range(ticks):
            if self._success or self._failed or self._truncated:
                break  # the episode is over: the env must not be stepped again
            native = self.profile.native_action(self._hold, self._obs, self.env)
            self._obs, _, terminated, truncated, self._info = self.env.step(native)
            self.tick += 1
            self._check_finite()
            self._success = self.profile.success(self._info)
            self._success_reported = self._success_reported or any(
                key in self._info for key in self.profile.success_keys
            )
            self._failed = bool(terminated) and not self._success
            self._truncated = bool(truncated) and not self._success
        return self._success, self._failed

    def _check_finite(self) -> None:
        check_observation({"state": self.profile.state(self._obs, self.env)}, self.task_name, self.tick)

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        success, failed = self.advance(action, self.config.ticks_per_control)
        return self.observe(), float(success), success or failed, self.timed_out and not success, self.info()

    def state(self) -> np.ndarray:
        return np.asarray(self.profile.state(self._obs, self.env), dtype=np.float32)

    def observe(self, render: bool = True) -> dict[str, Any]:
        obs: dict[str, Any] = {"state": self.state(), "prompt": self.prompt}
        if render:
            obs["images"] = self._render()
        return obs

    def _render(self) -> dict[str, np.ndarray]:
        if self._views is not None:
            return self._views.render()
        return self.profile.render_views(self.env)

    def ee_pos(self) -> np.ndarray | None:
        """The tracked position (for the jerk metric), in the env's units; None where none is known."""
        if not self.profile.ee_state:
            return None
        return self.state()[list(self.profile.ee_state)].astype(np.float64)

    def hold_action(self) -> np.ndarray:
        return np.asarray(self._hold, dtype=np.float64).copy()

    @property
    def time_s(self) -> float:
        return self.tick * self.config.physics_dt

    @property
    def timed_out(self) -> bool:
        """At the time limit, or truncated by the env itself (its own limit: the episode is over)."""
        return self._truncated or self.time_s >= self.config.time_limit_s - 1e-9

    def make_expert(self) -> Any:
        """The scripted expert: the profile's (`expert` "module:Class", or its `make_expert(task)`), else
        the wrapped env's `make_expert(task)` (or `make_expert()`); None when there is none."""
        if self.profile.expert:
            module, attr = self.profile.expert.split(":")
            import importlib

            return getattr(importlib.import_module(module), attr)(self)
        expert = self.profile.make_expert(self)
        if expert is not None:
            return expert
        maker = _find_attr(self.env, "make_expert")
        if maker is None:
            return None
        import inspect

        try:
            takes_task = bool(inspect.signature(maker).parameters)
        except (TypeError, ValueError):
            takes_task = False
        return maker(self) if takes_task else maker()

    def info(self) -> dict[str, Any]:
        """JSON-ready facts about the episode so far (recorded per episode)."""
        out: dict[str, Any] = {"time_s": self.time_s, "is_success": bool(self._success)}
        for key, value in self._info.items():
            if key in ("success", "is_success", "seed", "reset_options"):
                continue  # the recorder writes these itself
            if isinstance(value, bool | int | float | np.bool_ | np.integer | np.floating):
                out[key] = value.item() if isinstance(value, np.generic) else value
        return out

    def success_report(self) -> dict[str, Any]:
        """Whether this episode's env reported success under a key hotloop reads (`keys`), and the keys
        its last `info` held (`seen`): an env that reports under another key scores 0 % otherwise
        silently. An episode that took no step has nothing to say (`reported` None)."""
        return {
            "reported": self._success_reported if self.tick else None,
            "keys": list(self.profile.success_keys),
            "seen": sorted(str(k) for k in self._info)[:20],
        }

    def raw_observation(self) -> Any:
        """The env's own last observation (scripted experts read it)."""
        return self._obs

    def close(self) -> None:
        if self._views is not None:
            self._views.close()
        self.env.close()


def success_note(records: list[dict[str, Any]], task: str) -> str | None:
    """A line for a task whose env never reported success under a key hotloop reads, over every episode
    that stepped it (each one then scored a failure, whatever happened); None otherwise, and for tasks
    that say success themselves (the built-in ones, task objects)."""
    reports = [r["success_report"] for r in records if not r.get("error") and r.get("success_report")]
    said = [x for x in reports if x.get("reported") is not None]
    if not said or any(x["reported"] for x in said):
        return None
    keys = " or ".join(f"info[{k!r}]" for k in said[0]["keys"])
    seen = ", ".join(said[-1].get("seen") or []) or "no keys"
    return (
        f"{task} never reported success under {keys} in {len(said)} episode(s), so every one counted as "
        f"not successful; its last info held {seen}. If the env says success under another key, name it in "
        "its profile: GymProfile(success_key=...) (docs/tasks.md)"
    )


def _find_attr(env: Any, name: str) -> Any:
    """`name` on a gymnasium env or on any env it wraps (gymnasium 1.x wrappers do not forward)."""
    seen = 0
    while env is not None and seen < 32:
        value = vars(env).get(name) if hasattr(env, "__dict__") else None
        if value is None:
            value = getattr(type(env), name, None)
            value = getattr(env, name) if value is not None else None
        if value is not None:
            return value
        env, seen = getattr(env, "env", None), seen + 1
    return None


def attached_profile(env: Any) -> GymProfile | None:
    """The `GymProfile` a plugin attached to its env as `hotloop_profile`, or None."""
    profile = _find_attr(env, "hotloop_profile")
    if profile is not None and not isinstance(profile, GymProfile):
        raise ConfigError(
            f"the env's hotloop_profile is a {type(profile).__name__}; it must be a "
            "hotloop.sim.tasks.gym_profiles.GymProfile (docs/tasks.md)"
        )
    return profile


def check_seeding(task: Any) -> Any:
    """`task`, once two resets with one seed gave the same start; else the one-line error.

    An env that ignores `reset(seed=)` makes an episode's start depend on the episodes a worker ran
    before it: the results would not be repeatable, and episode seeds would not pair across runs."""
    try:
        first = np.asarray(task.reset(seed=0)[0]["state"], dtype=np.float64).copy()
        task.reset(seed=1)  # move its generator on: a reset that reseeds must not care
        second = np.asarray(task.reset(seed=0)[0]["state"], dtype=np.float64)
    except TaskFault as e:
        raise ConfigError(f"task {task.task_name!r} cannot start: {e}") from None
    if first.shape != second.shape or not np.array_equal(first, second, equal_nan=True):
        raise ConfigError(
            f"task {task.task_name!r} ignores reset(seed=...): two resets with seed 0 gave different "
            "observations, so episodes would not be repeatable; seed its generator in reset (gymnasium: "
            "super().reset(seed=seed), then draw from self.np_random)"
        )
    return task
