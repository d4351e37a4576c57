"""PolicyClient on a robot: a late reply never answers the next observation; a restarted server is found again."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hotloop.client import PolicyClient
from hotloop.serve.policies import serve_policy
from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread
from hotloop.serve.spec import ArraySpec


class StallOnNine:
    observation_spec = {"state": ArraySpec((2,), "float32")}

    def __init__(self) -> None:
        self.release = threading.Event()

    def reset(self) -> None:
        pass

    def infer(self, obs):
        if obs["state"][0] == 9:
            assert self.release.wait(timeout=30)
        return {"actions": np.tile(obs["state"], (3, 1))}


def _server(policy, port: int = 0) -> ServerThread:
    return ServerThread(PolicyServer(serve_policy("stall", policy), ServeConfig(port=port)))


def test_late_reply_is_never_taken_for_the_next_one():
    policy = StallOnNine()
    with _server(policy) as server, PolicyClient(port=server.port, reply_timeout_s=0.3) as client:
        with pytest.raises(TimeoutError, match="the next call reconnects"):
            client.infer({"state": np.array([9.0, 9.0])})
        policy.release.set()  # the stalled reply now goes to the abandoned connection
        client.reply_timeout_s = 30.0
        assert client.infer({"state": np.array([1.0, 2.0])})["actions"].tolist() == [[1.0, 2.0]] * 3


def test_reconnects_to_a_restarted_server():
    with _server(StallOnNine()) as first:
        port = first.port
        client = PolicyClient(port=port)
        assert client.infer({"state": np.ones(2)})["actions"].shape == (3, 2)
    with _server(StallOnNine(), port=port):
        with pytest.raises(ConnectionError, match="the next call reconnects"):
            client.infer({"state": np.ones(2)})
        assert client.infer({"state": np.full(2, 5.0)})["actions"].tolist() == [[5.0, 5.0]] * 3
        client.close()
