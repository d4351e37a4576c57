"""A third-party task package for the plugin-contract tests (installed at test time through a
dist-info on sys.path, see test_task_contract.py). Pure numpy: no simulator, so the tests stay fast.

`drift`: a hand in the plane whose native action is a per-step *delta* (0.05 per unit, like Fetch), a
goal on the x axis, success when the hand's x is within 3 cm of it. It carries its own profile (a
`DeltaProfile`) and expert, and reports what `make()` was told. The others are broken on purpose.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from hotloop.sim.tasks.gym_profiles import DeltaProfile

COUNTS = {"renders": 0, "resets": 0, "steps_after_end": 0}  # read by the tests (this process only)


class DriftEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, goal=0.5, starts=0, size=64, nan_after=0, seeded=True, end_after=0):
        self.goal, self.starts, self.size = goal, starts, size
        self.nan_after, self.seeded, self.end_after = nan_after, seeded, end_after
        self.render_mode = "rgb_array"
        self.observation_space = gym.spaces.Box(-2, 2, (3,), dtype=np.float64)
        self.action_space = gym.spaces.Box(-1, 1, (2,), dtype=np.float32)
        self.hand = np.zeros(2)
        self.steps = 0
        self.ended = False
        self._unseeded = np.random.default_rng()  # what an env that ignores its seed draws from

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        COUNTS["resets"] += 1
        rng = self.np_random if self.seeded else self._unseeded
        # `starts` > 0: only that many distinct starts (a finite set of configurations)
        start = rng.integers(self.starts) / max(self.starts, 1) if self.starts else rng.uniform(0, 1)
        self.hand = np.array([-0.5 * start, 0.0])
        self.steps, self.ended = 0, False
        return self._obs(), {}

    def _obs(self):
        obs = np.array([*self.hand, self.goal])
        if self.nan_after and self.steps >= self.nan_after:
            obs[0] = np.nan
        return obs

    def step(self, action):
        if self.ended:
            COUNTS["steps_after_end"] += 1
            raise RuntimeError("stepped after the episode ended")
        self.hand = self.hand + 0.05 * np.clip(np.asarray(action, dtype=np.float64), -1, 1)
        self.steps += 1
        success = bool(abs(self.hand[0] - self.goal) < 0.03)
        truncated = bool(self.end_after and self.steps >= self.end_after)
        self.ended = success or truncated
        return self._obs(), float(success), success, truncated, {"is_success": success}

    def render(self):
        COUNTS["renders"] += 1
        image = np.zeros((self.size, self.size, 3), dtype=np.uint8)
        image[:, int(np.clip((self.hand[0] + 1) / 2, 0, 1) * (self.size - 1))] = 255
        return image

    def make_expert(self, task):
        return GoalExpert(task)


class GoalExpert:
    """Aims at the goal's x; its y target (5.0) is far outside the bounds, so the label is clipped."""

    def __init__(self, task):
        self.task = task

    def reset(self):
        pass

    def act(self, obs):
        return np.array([self.task.raw_observation()[2], 5.0], dtype=np.float32)


PROFILE = DeltaProfile(
    prompt="move the hand to the goal",
    ee_state=(0, 1),
    delta_scale=0.05,
    target_low=(-1.0, -1.0),
    target_high=(1.0, 1.0),
    length_unit="m",
)


def make_drift(
    goal=0.5, starts=0, nan_after=0, seeded=True, end_after=0, profile=True, task_name=None, image_size=64
):
    env = DriftEnv(goal, starts, image_size, nan_after, seeded, end_after)
    env.told = {"task_name": task_name, "image_size": image_size}
    if profile:
        env.hotloop_profile = PROFILE
    return gym.wrappers.TimeLimit(env, max_episode_steps=60)


def make_raises():
    raise ValueError("the simulator's licence file is missing")


def make_none():
    return None


def make_type_error():
    return len(3)  # a TypeError inside make(), with no --task-kwargs given


class Incomplete:
    """Means to be a task object (advance, task_spec) but lacks most of the interface."""

    task_spec = None

    def advance(self, action, ticks):
        return False, False


def make_incomplete():
    return Incomplete()
