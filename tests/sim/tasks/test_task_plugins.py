"""A user's own task package, found through the `hotloop.tasks` entry-point group."""

import importlib
import sys
import textwrap

import numpy as np
import pytest

from hotloop.closedloop.pool import run_episodes
from hotloop.closedloop.workers import EpisodeJob
from hotloop.errors import UnknownNameError
from hotloop.sim.tasks import check_task, make_task, plugin_tasks

PLUGIN = '''
import gymnasium as gym
import numpy as np


class PointEnv(gym.Env):
    """A point on a line driven to an absolute target; success within 5 cm of the goal."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, goal=0.5, render_mode="rgb_array"):
        self.goal = goal
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1, 1, (2,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (1,), dtype=np.float32)
        self.x = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform(-1, 0))
        return np.array([self.x, self.goal], dtype=np.float32), {}

    def step(self, action):
        self.x += float(np.clip(action[0] - self.x, -0.1, 0.1))
        done = abs(self.x - self.goal) < 0.05
        return np.array([self.x, self.goal], dtype=np.float32), float(done), done, False, {"is_success": done}

    def render(self):
        image = np.zeros((32, 32, 3), dtype=np.uint8)
        image[:, int((self.x + 1) * 15.5)] = 255
        return image


def make(goal=0.5):
    return gym.wrappers.TimeLimit(PointEnv(goal=goal), max_episode_steps=40)
'''


@pytest.fixture
def point_plugin(tmp_path, monkeypatch):
    (tmp_path / "point_task.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "point_task-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: point-task\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[hotloop.tasks]\npoint = point_task:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield "point"
    sys.modules.pop("point_task", None)


def test_an_installed_plugin_is_a_task(point_plugin):
    assert point_plugin in plugin_tasks()
    check_task(point_plugin)
    env = make_task(point_plugin, task_kwargs='{"goal": 0.25}')
    try:
        spec = env.task_spec
        assert spec.state_dim == 2 and spec.action_dim == 1 and [i.key for i in spec.images] == ["view"]
        obs, _ = env.reset(seed=0)
        assert obs["state"][1] == pytest.approx(0.25)  # the keyword argument reached the plugin
        assert env.config.time_limit_s == pytest.approx(40 / 20)
        success = False
        for _ in range(40):
            success, _ = env.advance(np.array([0.25]), 1)
            if success:
                break
        assert success
    finally:
        env.close()


def test_keyword_arguments_the_plugin_does_not_take_are_one_line_errors(point_plugin):
    from hotloop.errors import ConfigError

    with pytest.raises(ConfigError, match="--task-kwargs for plugin task 'point' were not accepted"):
        make_task(point_plugin, task_kwargs='{"speed": 2}')


def test_a_plugin_task_runs_under_eval(point_plugin):
    job = EpisodeJob(
        target="toy:mlp", task=point_plugin, difficulty=None, strategy="chunk", latency="fixed:0"
    )
    (record,), _ = run_episodes(job, [0], workers=0)
    assert record["error"] is None and record["inferences"] >= 1


def test_unknown_names_list_the_plugins(point_plugin):
    with pytest.raises(UnknownNameError, match="Plugins \\(hotloop.tasks\\): point"):
        check_task("pointt")
