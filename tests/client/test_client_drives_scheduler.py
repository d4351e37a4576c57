"""The robot side end to end: the chunk scheduler's wall-clock runner drives a served policy through PolicyClient."""

from __future__ import annotations

import numpy as np
import pytest

from hotloop.client import PolicyClient
from hotloop.serve.policies import serve_policy
from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread
from hotloop.serve.spec import ArraySpec

runner_module = pytest.importorskip(
    "hotloop.realtime.runner", reason="the chunk scheduler is not on this branch"
)


class CountingChunks:
    """Chunk c holds c + 1 everywhere in column 0 and the observed state in column 1."""

    observation_spec = {"state": ArraySpec((2,), "float32")}

    def __init__(self) -> None:
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def infer(self, obs):
        self.calls += 1
        chunk = np.zeros((8, 2), np.float32)
        chunk[:, 0] = self.calls
        chunk[:, 1] = obs["state"][0]
        return {"actions": chunk}


class Robot:
    def __init__(self) -> None:
        self.sent: list[np.ndarray] = []

    def observe(self):
        return {"state": np.array([0.5, 0.0])}

    def command(self, action):
        self.sent.append(np.asarray(action, dtype=np.float64))

    def hold_action(self):
        return np.zeros(2)


def test_wall_clock_runner_over_the_wire():
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    served = serve_policy("counting", CountingChunks())
    robot = Robot()
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
    ):
        runner = runner_module.WallClockRunner(
            client, robot, lambda h: make_strategy("async", StrategyConfig(h)), control_hz=20.0
        )
        report = runner.run(1.0)
    assert report.chunks >= 1 and robot.sent
    served_rows = [a for a in robot.sent if a[0] >= 1]  # rows of a served chunk (not the hold action)
    assert served_rows, "no served action reached the robot"
    assert all(a[1] == 0.5 for a in served_rows)  # each carries the observation the robot sent
