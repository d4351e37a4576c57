"""Idle clients cannot keep a robot out (issue 38, class 4): without an API key, connections that only
answer pings fill --max-connections; a robot that connects then evicts the one open longest without an
observation (close code 1013) and is served at once. Connections that have sent observations are never
evicted: when every slot is a robot, a newcomer is refused (503). Over real websockets, the robot being
the real openpi-client in its own venv."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import numpy as np
import pytest
from serve_helpers import EchoPolicy, StateEchoPolicy, run_robot, start
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from hotloop.client import PolicyClient

IDLE = 40


class IdleClients:
    """`count` websocket clients that connect, read the metadata and then only answer pings (the sync
    client does that on its own thread) until closed; each records how its connection ended."""

    def __init__(self, url: str, count: int) -> None:
        self.sockets: list[Any] = []
        self.refused = 0
        self._stack = ExitStack()
        for _ in range(count):
            try:
                ws = self._stack.enter_context(connect(url, open_timeout=10, max_size=None))
            except InvalidStatus:
                self.refused += 1
                continue
            ws.recv(timeout=10)  # the metadata
            self.sockets.append(ws)

    def evicted(self) -> list[int]:
        codes = []
        for ws in self.sockets:
            try:
                ws.recv(timeout=0.01)
            except TimeoutError:
                continue
            except ConnectionClosed as closed:
                codes.append(closed.rcvd.code if closed.rcvd is not None else -1)
        return codes

    def close(self) -> None:
        self._stack.close()


def test_a_robot_connecting_while_40_idle_connections_are_open_is_served_within_10_s(openpi_python):
    with start(EchoPolicy()) as server:  # no API key, the default --max-connections of 16
        idle = IdleClients(server.url, IDLE)
        try:
            assert idle.refused == 0  # each newcomer made room: the oldest idle one went
            robot = run_robot(openpi_python, "served_in", server.port)
            assert robot["seconds"] < 10, robot
            assert robot["first"] == 4.0 and robot["more"] == [0.0, 1.0, 2.0, 3.0, 4.0]
            codes = idle.evicted()
            assert len(codes) == IDLE - 16 + 1 and set(codes) == {1013}, codes
        finally:
            idle.close()
        metrics = server.server.metrics
        assert metrics.value("hotloop_requests_total", {"outcome": "evicted"}) == IDLE - 16 + 1
        assert metrics.value("hotloop_requests_total", {"outcome": "refused"}) is None


def test_connections_that_sent_observations_are_never_evicted():
    with (
        start(StateEchoPolicy(), max_connections=3) as server,
        PolicyClient(port=server.port) as a,
        PolicyClient(port=server.port) as b,
    ):
        for robot, value in ((a, 1.0), (b, 2.0)):
            assert np.all(robot.infer({"state": np.full(8, value)})["actions"] == value)
        idle = IdleClients(server.url, 5)  # one slot left: each idle newcomer evicts the one before
        try:
            assert len(idle.sockets) == 5 and idle.evicted() == [1013] * 4
            for robot, value in ((a, 3.0), (b, 4.0)):  # the robots were never touched
                assert np.all(robot.infer({"state": np.full(8, value)})["actions"] == value)
            with PolicyClient(port=server.port) as c:  # evicts the last idle one, then is a robot
                assert np.all(c.infer({"state": np.full(8, 5.0)})["actions"] == 5.0)
                assert idle.evicted() == [1013] * 5
                with pytest.raises(InvalidStatus) as full:  # three robots: a fourth client waits
                    connect(server.url, open_timeout=10)
                assert full.value.response.status_code == 503
        finally:
            idle.close()
