"""The shared robot: a Cartesian gantry carrying a parallel gripper, above a belt, in MuJoCo.

Every task drives the same robot with the same action: an absolute end-effector target
`[x, y, z, grip]` (metres in the world frame; grip 0 = open, 1 = closed), held for one control period.
Absolute targets are what chunked policies predict well (openpi executes absolute targets too), and
"hold" is simply repeating the last target, which is what the evaluator does while a policy thinks.

Time has two clocks: physics ticks (`physics_dt`, 2 ms) and control periods (`control_hz`, 10 Hz). The
evaluator advances physics in ticks so that a latency of 50 ms is 25 ticks, not rounded to a period.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.sim.mujoco_import import import_mujoco

import_mujoco()  # MUJOCO_GL=egl unless the user chose, and a Ctrl-C during its start-up kept

import gymnasium as gym  # noqa: E402
import mujoco  # noqa: E402

from hotloop.errors import ConfigError  # noqa: E402

BELT_TOP = 0.06  # z of the belt surface (m)
FINGER_TRAVEL = 0.032  # each finger closes this far inward (m); open inner gap is 0.08 m
WORKSPACE_LOW = np.array([-0.45, -0.15, BELT_TOP + 0.028])  # finger tips stay above the belt
WORKSPACE_HIGH = np.array([0.45, 0.15, 0.35])
STATE_DIM = 10  # ee xyz, grip opening, target/object xyz, target/object velocity xyz
ACTION_DIM = 4

# The camera views a gantry task can render, by image key. "top" is every task's default; "wrist" (a camera
# on the gripper looking down between the fingers) is rendered only when asked for (`GantryConfig.views`,
# or `set_views` when a policy's spec names it), so tasks and policies that do not use it pay nothing.
VIEWS = ("top", "wrist")

STATE_NAMES = ["ee_x", "ee_y", "ee_z", "grip_open", "obj_x", "obj_y", "obj_z", "obj_vx", "obj_vy", "obj_vz"]
ACTION_NAMES = ["target_x", "target_y", "target_z", "grip"]


@dataclass(frozen=True)
class GantryConfig:
    """Settings shared by every gantry task; logged with every result."""

    image_size: int = 64
    control_hz: float = 10.0
    physics_dt: float = 0.002
    time_limit_s: float = 8.0
    camera: str = "top"  # the model camera behind the "top" view
    views: tuple[str, ...] = ("top",)  # the views observe() renders, in this order (see VIEWS)

    def __post_init__(self) -> None:
        if not 16 <= self.image_size <= 512:
            raise ConfigError(f"image_size must be in [16, 512] (got {self.image_size})")
        check_views(self.views)
        if self.control_hz <= 0:
            raise ConfigError(f"control_hz must be > 0 (got {self.control_hz})")
        ticks = 1.0 / (self.control_hz * self.physics_dt)
        if abs(ticks - round(ticks)) > 1e-6:
            raise ConfigError(
                f"control period must be a whole number of physics ticks: 1/(control_hz*physics_dt) = {ticks:g}"
            )

    @property
    def ticks_per_control(self) -> int:
        return round(1.0 / (self.control_hz * self.physics_dt))


def check_views(views: tuple[str, ...] | list[str], flag: str = "views") -> tuple[str, ...]:
    """The view keys as a tuple, or a ConfigError naming `flag` for an unknown, repeated or empty list."""
    views = tuple(views)
    unknown = [v for v in views if v not in VIEWS]
    if unknown or not views or len(set(views)) != len(views):
        raise ConfigError(
            f"{flag} must be distinct gantry camera views from {', '.join(VIEWS)} (got {','.join(views) or 'none'})"
        )
    return views


def gantry_xml(extra_bodies: str, belt: bool) -> str:
    """The scene: floor, optional belt, the gantry gripper, and task bodies supplied by the caller."""
    belt_xml = (
        f"""
    <body name="belt" pos="0 0 {BELT_TOP - 0.01}">
      <joint name="belt" type="slide" axis="1 0 0" damping="0"/>
      <geom name="belt" type="box" size="3 0.14 0.01" rgba="0.15 0.15 0.18 1" friction="1.2 0.01 0.001"
            mass="20"/>
      {"".join(f'<geom type="box" size="0.01 0.141 0.0102" pos="{x:.2f} 0 0" rgba="0.9 0.9 0.3 1" contype="0" conaffinity="0" mass="0"/>' for x in np.arange(-2.9, 3.0, 0.1))}
    </body>"""
        if belt
        else f"""
    <body name="table" pos="0 0 {BELT_TOP - 0.01}">
      <geom name="table" type="box" size="0.6 0.2 0.01" rgba="0.35 0.3 0.25 1" friction="1.2 0.01 0.001"/>
    </body>"""
    )
    return f"""
<mujoco model="hotloop-gantry">
  <compiler angle="radian"/>
  <option timestep="0.002" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual><global offwidth="512" offheight="512"/><quality shadowsize="0"/></visual>
  <default>
    <geom condim="4" solref="0.004 1"/>
  </default>
  <worldbody>
    <light pos="0 -0.3 1.2" dir="0 0.3 -1" diffuse="0.9 0.9 0.9"/>
    <geom name="floor" type="plane" size="2 2 0.1" rgba="0.55 0.6 0.65 1" contype="0" conaffinity="0"/>
    <camera name="top" pos="0 -0.26 0.72" xyaxes="1 0 0 0 0.89 0.45" fovy="56"/>
    {belt_xml}
    <body name="gripper" pos="0 0 0" gravcomp="1">
      <joint name="gx" type="slide" axis="1 0 0" range="{WORKSPACE_LOW[0]} {WORKSPACE_HIGH[0]}" damping="5"/>
      <joint name="gy" type="slide" axis="0 1 0" range="{WORKSPACE_LOW[1]} {WORKSPACE_HIGH[1]}" damping="5"/>
      <joint name="gz" type="slide" axis="0 0 1" range="{WORKSPACE_LOW[2]} {WORKSPACE_HIGH[2]}" damping="5"/>
      <site name="ee" pos="0 0 0" size="0.005" rgba="1 0 0 1"/>
      <geom name="palm" type="box" pos="0 0 0.035" size="0.06 0.025 0.01" rgba="0.8 0.4 0.1 1" mass="0.5"/>
      <geom name="mast" type="cylinder" pos="0 0 0.2" size="0.012 0.16" rgba="0.5 0.5 0.5 1" mass="0.2"
            contype="0" conaffinity="0"/>
      <!-- The wrist camera: beside the palm (out of its shadow), 4 cm up, tilted 34 deg from vertical to
           look at the point 2 cm below the end effector (between the fingertips), so the fingers frame the left and right of
           the image and an object between them fills its middle. Mounted 9 cm out because MuJoCo clips
           everything nearer than znear (1 % of the scene extent, 6 cm here). -->
      <camera name="wrist" pos="0 -0.09 0.04" xyaxes="1 0 0 0 0.555 0.832" fovy="75"/>
      <body name="finger_l" pos="-0.045 0 0" gravcomp="1">
        <joint name="fl" type="slide" axis="1 0 0" range="0 {FINGER_TRAVEL}" damping="2"/>
        <geom name="finger_l" type="box" size="0.005 0.02 0.025" rgba="0.9 0.55 0.2 1" mass="0.05"
              friction="1.5 0.02 0.001"/>
      </body>
      <body name="finger_r" pos="0.045 0 0" gravcomp="1">
        <joint name="fr" type="slide" axis="-1 0 0" range="0 {FINGER_TRAVEL}" damping="2"/>
        <geom name="finger_r" type="box" size="0.005 0.02 0.025" rgba="0.9 0.55 0.2 1" mass="0.05"
              friction="1.5 0.02 0.001"/>
      </body>
    </body>
    {extra_bodies}
  </worldbody>
  <actuator>
    <position name="ax" joint="gx" kp="3000" dampratio="1" ctrlrange="{WORKSPACE_LOW[0]} {WORKSPACE_HIGH[0]}"/>
    <position name="ay" joint="gy" kp="3000" dampratio="1" ctrlrange="{WORKSPACE_LOW[1]} {WORKSPACE_HIGH[1]}"/>
    <position name="az" joint="gz" kp="3000" dampratio="1" ctrlrange="{WORKSPACE_LOW[2]} {WORKSPACE_HIGH[2]}"/>
    <position name="afl" joint="fl" kp="300" dampratio="1" ctrlrange="0 {FINGER_TRAVEL}" forcerange="-8 8"/>
    <position name="afr" joint="fr" kp="300" dampratio="1" ctrlrange="0 {FINGER_TRAVEL}" forcerange="-8 8"/>
  </actuator>
</mujoco>
"""


class GantryEnv(gym.Env):  # type: ignore[misc]
    """Base class: owns the MuJoCo model, the action mapping, rendering and the physics clock.

    Subclasses supply the scene bodies (`_extra_xml`), episode randomization (`_randomize`), the
    privileged target state (`_target_state`) and the outcome (`_outcome`).
    """

    metadata = {"render_modes": ["rgb_array"]}
    task_name = "gantry"
    prompt = ""
    has_belt = False

    def __init__(self, config: GantryConfig | None = None) -> None:
        self.config = config or GantryConfig()
        self.model = mujoco.MjModel.from_xml_string(gantry_xml(self._extra_xml(), belt=self.has_belt))
        self.model.opt.timestep = self.config.physics_dt
        self.data = mujoco.MjData(self.model)
        self._renderer: Any = None  # created on first render: an EGL context per process
        self._wrist_renderer: Any = None  # its own, without anti-aliasing (see render)
        self.views = self.config.views
        self._ee_site = self.model.site("ee").id
        self._gripper_qpos = [self.model.joint(n).qposadr[0] for n in ("gx", "gy", "gz")]
        self._finger_qpos = [self.model.joint(n).qposadr[0] for n in ("fl", "fr")]
        self._hold = np.zeros(ACTION_DIM)
        self.tick = 0
        self.rng = np.random.default_rng(0)
        self.observation_space = self._observation_space()
        self.action_space = gym.spaces.Box(
            np.array([*WORKSPACE_LOW, 0.0], dtype=np.float32),
            np.array([*WORKSPACE_HIGH, 1.0], dtype=np.float32),
            dtype=np.float32,
        )

    def _observation_space(self) -> Any:
        size = self.config.image_size
        image = gym.spaces.Box(0, 255, (size, size, 3), dtype=np.uint8)
        return gym.spaces.Dict(
            {
                "images": gym.spaces.Dict({key: image for key in self.views}),
                "state": gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), dtype=np.float32),
            }
        )

    def add_bodies(self, xml: str) -> None:
        """Rebuild the scene with `xml` (bodies) added to the world after the task's own: a perturbation's
        distractor objects or occluder (`hotloop.sim.perturb`). Everything the scene already had keeps
        its id and address (the new bodies, joints and geoms come last), so ids cached by the task stay
        valid; the episode's state starts again at the next reset."""
        old = self.model
        self._added_xml = getattr(self, "_added_xml", "") + xml
        model = mujoco.MjModel.from_xml_string(
            gantry_xml(self._extra_xml() + self._added_xml, belt=self.has_belt)
        )
        model.opt.timestep = self.config.physics_dt
        for kind, count in (
            ("body", old.nbody),
            ("joint", old.njnt),
            ("geom", old.ngeom),
            ("camera", old.ncam),
        ):
            for i in range(count):
                if getattr(model, kind)(i).name != getattr(old, kind)(i).name:
                    raise ConfigError(
                        f"add_bodies: {kind} {i} moved; new bodies must come after the task's own"
                    )
        self.close()  # the renderers hold the old model's context
        self.model, self.data = model, mujoco.MjData(model)

    def set_views(self, views: tuple[str, ...] | list[str]) -> None:
        """Render these views from the next observation on (a policy asked for them; see
        `hotloop.closedloop.adapter.request_views`)."""
        self.views = check_views(views)
        self.observation_space = self._observation_space()

    # --- for subclasses -------------------------------------------------------------------------
    def _extra_xml(self) -> str:
        return ""

    def _randomize(self, rng: np.random.Generator, options: dict[str, Any]) -> None:
        """Place task bodies; the gripper home is already set. `options` are reset's (task-specific
        overrides, e.g. conveyor-pick's `box_x`); the random draws happen either way, so an option
        changes only what it names."""

    def _target_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Privileged (position, velocity) of what the task is about."""
        return np.zeros(3), np.zeros(3)

    def _outcome(self) -> tuple[bool, bool]:
        """(success, failed) at the current physics state."""
        return False, False

    def _before_tick(self) -> None:
        """Called before every physics tick (the belt sets its speed here)."""

    # --- gymnasium API ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        mujoco.mj_resetData(self.model, self.data)
        home = np.array([self.rng.uniform(0.05, 0.2), self.rng.uniform(-0.05, 0.05), 0.22])
        options = dict(options or {})
        if "home" in options:  # recorders start episodes in recovery states (see recorder.py)
            home = np.clip(np.asarray(options["home"], dtype=np.float64), WORKSPACE_LOW, WORKSPACE_HIGH)
        self.data.qpos[self._gripper_qpos] = home
        self._hold = np.array([*home, 0.0])
        self._apply(self._hold)
        self._randomize(self.rng, options)
        self.tick = 0
        mujoco.mj_forward(self.model, self.data)
        return self.observe(), self.info()

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        """One control period holding `action`; renders the observation (use `advance` to skip that)."""
        success, failed = self.advance(action, self.config.ticks_per_control)
        truncated = self.time_s >= self.config.time_limit_s and not success
        return self.observe(), float(success), success or failed, truncated, self.info()

    def advance(self, action: np.ndarray, ticks: int) -> tuple[bool, bool]:
        """Hold `action` for `ticks` physics ticks without rendering; stops early on success or failure."""
        self._apply(action)
        for _ in range(ticks):
            self._before_tick()
            mujoco.mj_step(self.model, self.data)
            self.tick += 1
            success, failed = self._outcome()
            if success or failed:
                return success, failed
        return self._outcome()

    @property
    def time_s(self) -> float:
        return self.tick * self.config.physics_dt

    @property
    def timed_out(self) -> bool:
        return self.time_s >= self.config.time_limit_s

    def ee_pos(self) -> np.ndarray:
        return self.data.site_xpos[self._ee_site].copy()

    def grip_opening(self) -> float:
        """Inner gap between the fingers (m): 0.08 open; the object's width when it holds the object."""
        return float(0.08 - self.data.qpos[self._finger_qpos].sum())

    def state(self) -> np.ndarray:
        pos, vel = self._target_state()
        return np.concatenate([self.ee_pos(), [self.grip_opening()], pos, vel]).astype(np.float32)

    def observe(self, render: bool = True) -> dict[str, Any]:
        # `timestamp`: simulated seconds at which this observation was taken (trackers need it).
        obs: dict[str, Any] = {"state": self.state(), "prompt": self.prompt, "timestamp": self.time_s}
        if render:
            obs["images"] = {key: self.render(key) for key in self.views}
        return obs

    def render(self, view: str = "top") -> np.ndarray:
        """One view (a key of VIEWS) at the configured size, (H, W, 3) uint8."""
        if view == "wrist":
            return self._render_wrist()
        if view != "top":
            check_views((view,), flag="view")
        if self._renderer is None:
            size = self.config.image_size
            self._renderer = mujoco.Renderer(self.model, height=size, width=size)
        self._renderer.update_scene(self.data, camera=self.config.camera)
        return np.asarray(self._renderer.render(), dtype=np.uint8).copy()

    def _render_wrist(self) -> np.ndarray:
        # Its own renderer, made without multisample anti-aliasing (the model's offsamples is read when a
        # renderer's buffer is made, so it is zeroed for this one only): on software EGL anti-aliasing
        # multiplies the cost of a frame and a 64 px policy input gains nothing from it. The top view keeps
        # the renderer it always had, so its pixels (and demo:conveyor's actions) do not change.
        if self._wrist_renderer is None:
            size = self.config.image_size
            quality = self.model.vis.quality
            samples = quality.offsamples
            quality.offsamples = 0
            try:
                self._wrist_renderer = mujoco.Renderer(self.model, height=size, width=size)
            finally:
                quality.offsamples = samples
        self._wrist_renderer.update_scene(self.data, camera="wrist")
        return np.asarray(self._wrist_renderer.render(), dtype=np.uint8).copy()

    def info(self) -> dict[str, Any]:
        return {"time_s": self.time_s}

    def close(self) -> None:
        for name in ("_renderer", "_wrist_renderer"):
            renderer = getattr(self, name)
            if renderer is not None:
                renderer.close()
                setattr(self, name, None)

    @property
    def task_spec(self) -> Any:
        """What this task provides to a policy (see hotloop.policy_spec)."""
        from hotloop.policy_spec import ImageSpec, TaskSpec

        size = self.config.image_size
        return TaskSpec(
            name=self.task_name,
            images=tuple(ImageSpec(key, size, size) for key in self.views),  # the keys observe() uses
            optional_images=tuple(ImageSpec(key, size, size) for key in VIEWS if key not in self.views),
            state_names=tuple(STATE_NAMES),
            action_names=tuple(ACTION_NAMES),
            ee_state=(0, 1, 2),
            action_low=(*map(float, WORKSPACE_LOW), 0.0),
            action_high=(*map(float, WORKSPACE_HIGH), 1.0),
            prompt=self.prompt,
            fps=self.config.control_hz,
            robot_type="hotloop-gantry",
        )

    def hold_action(self) -> np.ndarray:
        """The last commanded target: what the robot keeps doing while nobody tells it otherwise."""
        return self._hold.copy()

    def _apply(self, action: np.ndarray) -> None:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (ACTION_DIM,):
            raise ConfigError(f"action must have shape ({ACTION_DIM},) = {ACTION_NAMES} (got {action.shape})")
        if not np.all(np.isfinite(action)):
            raise ConfigError(f"action must be finite (got {action.tolist()})")
        target = np.clip(action[:3], WORKSPACE_LOW, WORKSPACE_HIGH)
        grip = float(np.clip(action[3], 0.0, 1.0))
        self._hold = np.array([*target, grip])
        self.data.ctrl[:3] = target
        self.data.ctrl[3:5] = grip * FINGER_TRAVEL
