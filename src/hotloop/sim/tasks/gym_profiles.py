"""What hotloop knows about families of third-party gymnasium environments.

A profile says how to read an env's observation as a state vector (and which entries are the end
effector), how to turn a held absolute target into the env's native action, where images come from,
what counts as success, and which scripted expert records demonstrations. `GymProfile` itself is the
fallback for any env: flattened observation, native action taken as absolute, images from the env's
MuJoCo model when it has one (`GENERIC_ASSUMPTIONS`, printed when it is used).

A plugin states what hotloop cannot guess by attaching a profile to the env its `make()` returns:
`env.hotloop_profile = GymProfile(prompt=..., ee_state=..., cameras=...)`, or a subclass that overrides
the methods below (`DeltaProfile` for envs whose native action is a per-step delta). The profile is the
documented, stable part of this module (docs/tasks.md); its methods take the env hotloop wraps.

The delta rule. A delta env moves its end effector by `scale * action` per step. hotloop holds an
absolute target, so every step it sends `clip((target - origin) / scale, -1, 1)`, where `origin` is
where the next delta is applied from. Fetch applies a delta to its mocap body, and its hand follows the
mocap within a fraction of a step, so the hand's position is a good origin (`FetchProfile`). Where the
hand lags the mocap (a soft weld, a heavy arm), the hand is the wrong origin: the mocap runs ahead and
the held target oscillates; such a profile returns the mocap's position from `DeltaProfile.delta_origin`.

- `FetchProfile` (gymnasium-robotics `Fetch*`): state = `observation` + `desired_goal`; the action is a
  gripper target `[x, y, z, grip]` in metres (grip: the env's own finger command, +1 open, -1 closed);
  each native step moves the gripper by `0.05 * action[:3]`, so the held target becomes
  `clip((target - gripper) / 0.05, -1, 1)` every step. Works around MuJoCo 4.0's enum comparison in
  gymnasium-robotics' joint helpers (see `_enum_safe_mujoco_utils`).
- `PushTProfile` (gym-pusht): state = agent xy, block xy, block angle; the action is already an
  absolute agent target in pixels (0-512); images from the env's own pygame renderer, at the policy
  image size, without the action marker the visualisation draws.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.sim.tasks.mj_views import FreeCamera, MujocoViews

GENERIC_ASSUMPTIONS = (
    "assuming state = its flattened observation, action = its native action held as an absolute target "
    "(a delta or velocity action drifts while held: attach a hotloop_profile, docs/tasks.md), images "
    "from its MuJoCo model or render()"
)


@dataclass(frozen=True)
class GymProfile:
    """What hotloop knows of an env (the fields), and how it reads and drives it (the methods)."""

    prompt: str = ""
    image_size: int = 64
    ee_state: tuple[int, ...] = ()  # state entries of the end-effector position (x, y, z)
    expert: str = ""  # "module:Class" of a scripted expert, if we have one
    # The unit of the positions in the actions and in ee_state; None for an env we know nothing of
    # (its actions may be torques or joint angles: the evaluator then names no unit).
    length_unit: str | None = None
    # The views of a MuJoCo env: (name, model camera name or FreeCamera) pairs; () = one free "scene"
    # camera on the whole model. A FreeCamera's azimuth and elevation rotate the view.
    cameras: tuple[tuple[str, str | FreeCamera], ...] = ()
    reflections: bool = False  # reflective materials cost 1.6-1.8x per frame and a policy rarely needs them
    shadows: bool = False
    # How the held target becomes the native action, in words (recorded with the run; see the delta rule).
    action_rule: str = "absolute: the native action is the held target"
    # The `info` key the env reports success under; "" = the gymnasium conventions `is_success`, then
    # `success`. An env that never reports the key it is read from is said on stderr (`GymTask`).
    success_key: str = ""

    def register(self) -> None:
        """Import whatever registers the env ids (a package's import side effect)."""

    def patch_spec(self, spec: Any) -> Any:
        return spec

    def default_kwargs(self, image_size: int) -> dict[str, Any]:
        return {}

    def step_dt(self, env: Any) -> float:
        base = env.unwrapped
        dt = getattr(base, "dt", None)
        return float(dt) if dt else 1.0 / float(env.metadata.get("render_fps") or 10)

    def state(self, obs: Any, env: Any) -> np.ndarray:
        if isinstance(obs, dict):
            return np.concatenate([np.asarray(obs[k], dtype=np.float64).ravel() for k in sorted(obs)])
        return np.asarray(obs, dtype=np.float64).ravel()

    def state_names(self, n: int) -> list[str]:
        return [f"state_{i}" for i in range(n)]

    def action_names(self, env: Any) -> list[str]:
        return [f"action_{i}" for i in range(env.action_space.shape[0])]

    def action_bounds(self, env: Any) -> tuple[np.ndarray, np.ndarray]:
        space = env.action_space
        return np.asarray(space.low, dtype=np.float32), np.asarray(space.high, dtype=np.float32)

    def initial_target(self, obs: Any, env: Any) -> np.ndarray:
        low, high = self.action_bounds(env)
        return np.clip(np.zeros(len(low)), low, high)

    def native_action(self, target: np.ndarray, obs: Any, env: Any) -> np.ndarray:
        return np.asarray(target, dtype=env.action_space.dtype)

    @property
    def success_keys(self) -> tuple[str, ...]:
        """The `info` keys success is read from, in order."""
        return (self.success_key,) if self.success_key else ("is_success", "success")

    def success(self, info: dict[str, Any]) -> bool:
        for key in self.success_keys:
            if key in info:
                return bool(info[key])
        return False

    def views(self, env: Any, size: int) -> MujocoViews | None:
        base = env.unwrapped
        model, data = getattr(base, "model", None), getattr(base, "data", None)
        if model is None or data is None or not hasattr(model, "vis"):
            return None
        cameras: dict[str, str | FreeCamera] = dict(self.cameras)
        if not cameras:
            center = tuple(float(v) for v in model.stat.center)
            cameras = {"scene": FreeCamera(center, 1.5 * float(model.stat.extent), 90.0, -30.0)}  # type: ignore[arg-type]
        return MujocoViews(model, data, cameras, size, shadows=self.shadows, reflections=self.reflections)

    def make_expert(self, task: Any) -> Any:
        """A scripted expert for `task` (the `GymTask`), or None; override in a plugin's profile. The
        expert has `reset()` and `act(obs) -> action` (an absolute target, like a policy's)."""
        return None

    def render_views(self, env: Any) -> dict[str, np.ndarray]:
        """Images when `views` gave no MuJoCo renderer: the env's own `render()` in rgb_array mode."""
        if getattr(env, "render_mode", None) != "rgb_array":
            return {}
        frame = env.render()
        return {} if frame is None else {"view": np.asarray(frame, dtype=np.uint8)}


@dataclass(frozen=True)
class DeltaProfile(GymProfile):
    """An env whose first `len(ee_state)` native action entries move the end effector by
    `delta_scale * action` per step (clipped to [-1, 1]); the rest pass through as they are.

    `target_low` / `target_high` bound the absolute target (the workspace, then the other entries);
    `delta_origin` is where the next delta is applied from (the hand by default; override it to read
    the mocap for an env whose mocap runs ahead of the hand, see the module docstring)."""

    delta_scale: float = 1.0
    target_low: tuple[float, ...] = ()
    target_high: tuple[float, ...] = ()
    action_rule: str = "delta: clip((target - delta_origin) / delta_scale, -1, 1) every step"

    def delta_origin(self, obs: Any, env: Any) -> np.ndarray:
        return self.state(obs, env)[list(self.ee_state)]

    def action_bounds(self, env: Any) -> tuple[np.ndarray, np.ndarray]:
        n = env.action_space.shape[0]
        if len(self.target_low) != n or len(self.target_high) != n:
            from hotloop.errors import ConfigError

            raise ConfigError(
                f"DeltaProfile needs target_low and target_high of {n} numbers each (the workspace of the "
                "absolute target, then the other action entries)"
            )
        return np.asarray(self.target_low, dtype=np.float32), np.asarray(self.target_high, dtype=np.float32)

    def initial_target(self, obs: Any, env: Any) -> np.ndarray:
        low, high = self.action_bounds(env)
        rest = np.clip(
            np.zeros(len(low) - len(self.ee_state)), low[len(self.ee_state) :], high[len(self.ee_state) :]
        )
        return np.array([*self.delta_origin(obs, env), *rest])

    def native_action(self, target: np.ndarray, obs: Any, env: Any) -> np.ndarray:
        k = len(self.ee_state)
        delta = np.clip((target[:k] - self.delta_origin(obs, env)) / self.delta_scale, -1.0, 1.0)
        return np.array([*delta, *target[k:]], dtype=env.action_space.dtype)


def _enum_safe_mujoco_utils() -> Any:
    """gymnasium-robotics' mujoco_utils with the joint helpers rewritten on plain ints.

    MuJoCo 4.0's enum members no longer compare equal to the numpy integers of `model.jnt_type` when
    the enum is on the left, so `joint_type in (mjJNT_HINGE, mjJNT_SLIDE)` is False and every Fetch env
    fails its constructor. The env reads these helpers through `self._utils`; our subclass points that
    at this copy, so nothing in site-packages changes.
    """
    from hotloop.sim.mujoco_import import import_mujoco

    import_mujoco()
    import mujoco
    from gymnasium_robotics.utils import mujoco_utils

    dims_qpos = {int(mujoco.mjtJoint.mjJNT_FREE): 7, int(mujoco.mjtJoint.mjJNT_BALL): 4}
    dims_qvel = {int(mujoco.mjtJoint.mjJNT_FREE): 6, int(mujoco.mjtJoint.mjJNT_BALL): 3}

    def span(model: Any, name: str, qvel: bool) -> tuple[int, int]:
        joint_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if joint_id < 0:
            raise KeyError(f"joint {name!r} is not part of the model")
        kind = int(model.jnt_type[joint_id])
        start = int(model.jnt_dofadr[joint_id] if qvel else model.jnt_qposadr[joint_id])
        return start, start + (dims_qvel if qvel else dims_qpos).get(kind, 1)

    def set_joint_qpos(model: Any, data: Any, name: str, value: Any) -> None:
        a, b = span(model, name, False)
        data.qpos[a:b] = np.asarray(value).reshape(b - a) if b - a > 1 else value

    def set_joint_qvel(model: Any, data: Any, name: str, value: Any) -> None:
        a, b = span(model, name, True)
        data.qvel[a:b] = np.asarray(value).reshape(b - a) if b - a > 1 else value

    def get_joint_qpos(model: Any, data: Any, name: str) -> np.ndarray:
        a, b = span(model, name, False)
        return data.qpos[a:b].copy()  # type: ignore[no-any-return]

    def get_joint_qvel(model: Any, data: Any, name: str) -> np.ndarray:
        a, b = span(model, name, True)
        return data.qvel[a:b].copy()  # type: ignore[no-any-return]

    def robot_get_obs(model: Any, data: Any, joint_names: Any) -> tuple[np.ndarray, np.ndarray]:
        names = [n for n in joint_names or () if n.startswith("robot")]
        if not names:
            return np.zeros(0), np.zeros(0)
        qpos = np.squeeze(np.array([get_joint_qpos(model, data, n) for n in names]))
        return qpos, np.squeeze(np.array([get_joint_qvel(model, data, n) for n in names]))

    utils = types.ModuleType("hotloop_mujoco_utils")
    utils.__dict__.update({k: v for k, v in vars(mujoco_utils).items() if not k.startswith("__")})
    utils.set_joint_qpos = set_joint_qpos  # type: ignore[attr-defined]
    utils.set_joint_qvel = set_joint_qvel  # type: ignore[attr-defined]
    utils.get_joint_qpos = get_joint_qpos  # type: ignore[attr-defined]
    utils.get_joint_qvel = get_joint_qvel  # type: ignore[attr-defined]
    # robot_get_obs calls the module's own getters by global name: ours must call the safe ones.
    utils.robot_get_obs = robot_get_obs  # type: ignore[attr-defined]
    return utils


def _with_enum_safe_utils(env_class: type) -> type:
    """A subclass of a gymnasium-robotics MuJoCo env that uses `_enum_safe_mujoco_utils`."""

    class Patched(env_class):  # type: ignore[valid-type,misc]
        def _initialize_simulation(self) -> None:
            self._utils = _enum_safe_mujoco_utils()
            super()._initialize_simulation()

    Patched.__name__ = Patched.__qualname__ = env_class.__name__
    return Patched


FETCH_OBS_NAMES = {
    10: [
        "grip_x",
        "grip_y",
        "grip_z",
        "finger_r",
        "finger_l",
        "grip_vx",
        "grip_vy",
        "grip_vz",
        "finger_vr",
        "finger_vl",
    ],
    25: [
        *("grip_x", "grip_y", "grip_z", "obj_x", "obj_y", "obj_z", "rel_x", "rel_y", "rel_z"),
        *("finger_r", "finger_l", "obj_rx", "obj_ry", "obj_rz", "obj_vx", "obj_vy", "obj_vz"),
        *("obj_wx", "obj_wy", "obj_wz", "grip_vx", "grip_vy", "grip_vz", "finger_vr", "finger_vl"),
    ],
}
FETCH_DELTA_SCALE = 0.05  # metres per step at action 1.0 (gymnasium-robotics fetch_env._set_action)
FETCH_LOW = np.array([1.0, 0.35, 0.40, -1.0], dtype=np.float32)  # the table top and the air above it
FETCH_HIGH = np.array([1.7, 1.15, 1.00, 1.0], dtype=np.float32)


@dataclass(frozen=True)
class FetchProfile(GymProfile):
    def register(self) -> None:
        import gymnasium as gym
        import gymnasium_robotics

        gym.register_envs(gymnasium_robotics)

    def patch_spec(self, spec: Any) -> Any:
        import dataclasses
        import importlib

        if not isinstance(spec.entry_point, str):
            return spec
        module, attr = spec.entry_point.split(":")
        env_class = getattr(importlib.import_module(module), attr)
        if not hasattr(env_class, "_initialize_simulation") or "MujocoPy" in attr:
            return spec
        return dataclasses.replace(spec, entry_point=_with_enum_safe_utils(env_class))

    def state(self, obs: Any, env: Any) -> np.ndarray:
        return np.concatenate([obs["observation"], obs["desired_goal"]]).astype(np.float64)

    def state_names(self, n: int) -> list[str]:
        names = FETCH_OBS_NAMES.get(n - 3, [f"obs_{i}" for i in range(n - 3)])
        return [*names, "goal_x", "goal_y", "goal_z"]

    def action_names(self, env: Any) -> list[str]:
        return ["target_x", "target_y", "target_z", "grip"]

    def action_bounds(self, env: Any) -> tuple[np.ndarray, np.ndarray]:
        return FETCH_LOW.copy(), FETCH_HIGH.copy()

    def initial_target(self, obs: Any, env: Any) -> np.ndarray:
        return np.array([*obs["observation"][:3], 1.0])  # where the gripper is, open

    def native_action(self, target: np.ndarray, obs: Any, env: Any) -> np.ndarray:
        delta = np.clip((target[:3] - obs["observation"][:3]) / FETCH_DELTA_SCALE, -1.0, 1.0)
        return np.array([*delta, target[3]], dtype=np.float32)

    def views(self, env: Any, size: int) -> MujocoViews | None:
        base = env.unwrapped
        # In front of the table, a little above it: the gripper, the block and the goal all in view.
        front = FreeCamera((1.3, 0.75, 0.5), 1.3, 180.0, -30.0)
        return MujocoViews(base.model, base.data, {"front": front}, size)


@dataclass(frozen=True)
class PushTProfile(GymProfile):
    def register(self) -> None:
        import gym_pusht  # noqa: F401 - registers gym_pusht/PushT-v0

    def default_kwargs(self, image_size: int) -> dict[str, Any]:
        return {
            "obs_type": "state",
            "render_mode": "rgb_array",
            "observation_width": image_size,
            "observation_height": image_size,
        }

    def step_dt(self, env: Any) -> float:
        return 1.0 / float(env.unwrapped.control_hz)  # its `dt` is the physics substep

    def state(self, obs: Any, env: Any) -> np.ndarray:
        if isinstance(obs, dict) or np.asarray(obs).shape != (5,):
            base = env.unwrapped  # another obs_type: read the same five numbers from the env
            return np.array([*base.agent.position, *base.block.position, base.block.angle % (2 * np.pi)])
        return np.asarray(obs, dtype=np.float64)

    def state_names(self, n: int) -> list[str]:
        return ["agent_x", "agent_y", "block_x", "block_y", "block_angle"]

    def action_names(self, env: Any) -> list[str]:
        return ["target_x", "target_y"]

    def initial_target(self, obs: Any, env: Any) -> np.ndarray:
        return np.array(env.unwrapped.agent.position, dtype=np.float64)

    def views(self, env: Any, size: int) -> MujocoViews | None:
        return None

    def render_views(self, env: Any) -> dict[str, np.ndarray]:
        return {"top": np.asarray(env.unwrapped._render(visualize=False), dtype=np.uint8)}


def profile_for(env_id: str) -> GymProfile:
    name = env_id.split("/")[-1]
    if name.startswith("Fetch"):
        goal = (
            "move the gripper to the red target"
            if name.startswith("FetchReach")
            else ("pick up the black block and place it at the red target")
        )
        expert = {
            "FetchReach": "hotloop.sim.gym_experts:FetchReachExpert",
            "FetchPickAndPlace": "hotloop.sim.gym_experts:FetchPickAndPlaceExpert",
        }.get(name.split("-")[0], "")
        return FetchProfile(
            prompt=goal,
            ee_state=(0, 1, 2),
            expert=expert,
            length_unit="m",
            action_rule="delta: clip((target - gripper) / 0.05, -1, 1) every step (the gripper follows "
            "Fetch's mocap within a fraction of a step, so the gripper is the delta's origin)",
        )
    if name.startswith("PushT"):
        return PushTProfile(
            prompt="push the T block onto the green T",
            ee_state=(0, 1),
            expert="hotloop.sim.gym_experts:PushTExpert",
            length_unit="px",  # PushT's 512 x 512 pixel workspace
        )
    return GymProfile()
