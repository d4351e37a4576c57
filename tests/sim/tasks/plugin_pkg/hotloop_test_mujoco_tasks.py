"""A third-party MuJoCo task for the plugin-contract tests (installed at test time through a dist-info
on sys.path, see tests/sim/tasks/conftest.py), written only against docs/tasks.md.

`slider`: a block on a rail driven by a position actuator to an absolute target, a goal on the rail;
success when the block rests within 3 cm of it. Its two cameras are named as this task's author would
name them, `corner` (fixed in the world) and `gripper` (riding on the block), not `top` / `wrist`. It
steps at 10 Hz (50 physics steps of 2 ms), so a latency under 100 ms cannot be simulated exactly.

`reports` picks the `info` key the env says success under (gymnasium's `is_success` by default; e.g.
`succeed`), `profile_key` the `success_key` its profile names (none by default); `extra_state` appends
that many zeros to the observation (the same scene with a wider state: another robot's layout).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from hotloop.sim.tasks.gym_profiles import GymProfile

XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <light pos="0 0 2"/>
    <geom type="plane" size="2 2 0.1" rgba="0.4 0.4 0.4 1"/>
    <camera name="corner" pos="1.2 -1.2 1.0" xyaxes="1 1 0 -0.4 0.4 1"/>
    <site name="goal" pos="0.5 0 0.05" size="0.03" rgba="0 1 0 1"/>
    <body name="block" pos="0 0 0.05">
      <joint name="rail" type="slide" axis="1 0 0" damping="10"/>
      <geom type="box" size="0.05 0.05 0.05" mass="1" rgba="0.9 0.3 0.2 1"/>
      <camera name="gripper" pos="0 -0.3 0.2" xyaxes="1 0 0 0 0.5 1"/>
    </body>
  </worldbody>
  <actuator>
    <position joint="rail" kp="50" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


class SliderEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, goal: float = 0.5, reports: str = "is_success", extra_state: int = 0) -> None:
        import mujoco

        self.model = mujoco.MjModel.from_xml_string(XML)
        self.data = mujoco.MjData(self.model)
        self.goal, self.reports, self.extra_state = goal, reports, extra_state
        self.frame_skip = 50
        self.dt = self.model.opt.timestep * self.frame_skip  # 0.1 s: a 10 Hz env
        self.render_mode = "rgb_array"
        self.observation_space = gym.spaces.Box(-5, 5, (3 + extra_state,), dtype=np.float64)
        self.action_space = gym.spaces.Box(-1, 1, (1,), dtype=np.float32)  # the block's absolute target

    def _obs(self) -> np.ndarray:
        return np.array([self.data.qpos[0], self.data.qvel[0], self.goal, *[0.0] * self.extra_state])

    def reset(self, *, seed=None, options=None):
        import mujoco

        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[0] = self.np_random.uniform(-0.5, 0.0)
        self.data.ctrl[0] = self.data.qpos[0]
        mujoco.mj_forward(self.model, self.data)
        return self._obs(), {}

    def step(self, action):
        import mujoco

        self.data.ctrl[0] = float(np.clip(action[0], -1, 1))
        mujoco.mj_step(self.model, self.data, nstep=self.frame_skip)
        obs = self._obs()
        success = bool(abs(obs[0] - self.goal) < 0.03 and abs(obs[1]) < 0.05)
        return obs, float(success), success, False, {self.reports: success, "x": float(obs[0])}

    def make_expert(self, task):
        return GoalExpert(task)


class GoalExpert:
    def __init__(self, task):
        self.task = task

    def reset(self):
        pass

    def act(self, obs):
        return np.array([self.task.raw_observation()[2]], dtype=np.float32)


def make_slider(goal=0.5, reports="is_success", profile_key="", extra_state=0, image_size=64):
    env = SliderEnv(goal, reports, extra_state)
    env.hotloop_profile = GymProfile(
        prompt="slide the block to the goal",
        cameras=(("corner", "corner"), ("gripper", "gripper")),
        length_unit="m",
        success_key=profile_key,
    )
    return gym.wrappers.TimeLimit(env, max_episode_steps=40)
