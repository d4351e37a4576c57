"""Server behaviour a robot client cannot provoke politely: silent, vanishing and streaming clients."""

from __future__ import annotations

import socket
import struct
import time
import urllib.request

import numpy as np
import pytest
from serve_helpers import GatedPolicy, StateEchoPolicy, start
from websockets.sync.client import connect

from hotloop.client import PolicyClient, ServerError, codec


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def _still_serves(port: int) -> None:
    with PolicyClient(port=port) as client:
        assert np.all(client.infer({"state": np.full(8, 4.0)})["actions"] == 4.0)


def test_healthz_and_metrics_on_the_websocket_port():
    with start(StateEchoPolicy()) as server:
        base = f"http://127.0.0.1:{server.port}"
        assert urllib.request.urlopen(f"{base}/healthz", timeout=10).read() == b"OK\n"
        _still_serves(server.port)
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=")
            body = response.read().decode()
        assert 'hotloop_stage_seconds_count{stage="infer"} 1.0' in body
        assert 'hotloop_requests_total{outcome="ok"} 1.0' in body
        assert "hotloop_resident_memory_bytes" in body
        assert "hotloop_dropped_observations_total 0.0" in body


def test_newest_observation_wins_and_stale_ones_are_counted():
    policy = GatedPolicy()
    with start(policy) as server, connect(server.url, max_size=None) as ws:
        codec.unpackb(ws.recv(timeout=10))  # metadata
        ws.send(codec.packb({"state": np.full(8, 0.0)}))
        assert policy.entered.wait(timeout=10)  # request 0 is in the model, blocked
        for value in range(1, 5):  # 1..4 arrive while it runs: each replaces the one before
            ws.send(codec.packb({"state": np.full(8, float(value))}))
        _wait_for(lambda: server.server.metrics.value("hotloop_dropped_observations_total") == 3)
        policy.gate.set()
        first, second = codec.unpackb(ws.recv(timeout=10)), codec.unpackb(ws.recv(timeout=10))
        assert (first["request_id"], second["request_id"]) == (0, 4)
        assert np.all(second["actions"] == 4.0)
        assert policy.seen[1:] == [0.0, 4.0]  # 1, 2 and 3 never reached the model


def test_text_frame_gets_an_error_and_the_connection_stays():
    with start(StateEchoPolicy()) as server, connect(server.url) as ws:
        ws.recv(timeout=10)
        ws.send("hello")
        assert "send the observation as msgpack bytes" in ws.recv(timeout=10)
        ws.send(codec.packb({"state": np.ones(8)}))
        assert np.all(codec.unpackb(ws.recv(timeout=10))["actions"] == 1.0)


def test_typed_error_from_the_hotloop_client():
    with start(StateEchoPolicy()) as server, PolicyClient(port=server.port) as client:
        with pytest.raises(ServerError, match="unknown key"):
            client.infer({"state": np.ones(8), "extra": np.ones(1)})
        assert client.action_spec == {"actions": {"shape": [10, 8], "dtype": "float32", "optional": False}}
        assert np.all(client.infer(client.zero_observation())["actions"] == 0.0)


def test_client_that_never_handshakes_is_closed_and_others_are_served():
    with start(StateEchoPolicy(), open_timeout_s=0.5) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as silent:
            _still_serves(server.port)
            assert silent.recv(1) == b""  # the server closed it after the open timeout
        _still_serves(server.port)


def test_client_that_connects_and_sends_nothing_does_not_disturb_others():
    with start(StateEchoPolicy()) as server, connect(server.url) as idle:
        assert "observation_spec" in codec.unpackb(idle.recv(timeout=10))
        _still_serves(server.port)
        _wait_for(lambda: server.server.metrics.value("hotloop_connections") == 1)


def test_client_that_disconnects_mid_message():
    with start(StateEchoPolicy()) as server:
        ws = connect(server.url, legacy=True)
        ws.recv(timeout=10)
        payload = codec.packb({"state": np.ones(8)})
        # A masked binary frame announcing the whole payload, of which only half is sent before the socket dies.
        header = bytes([0x82, 0x80 | 126]) + struct.pack("!H", len(payload)) + b"\x00\x00\x00\x00"
        ws.socket.sendall(header + payload[: len(payload) // 2])
        ws.socket.close()
        _wait_for(lambda: server.server.metrics.value("hotloop_connections") == 0)
        _still_serves(server.port)


class _BrokenPolicy(StateEchoPolicy):
    """Raises on a negative state, returns a list on state 7: two ways a policy can fail a request."""

    def infer(self, obs):
        value = float(obs["state"][0])
        if value < 0:
            raise RuntimeError("negative state")
        if value == 7:
            return [1, 2, 3]
        return super().infer(obs)


def test_a_failing_policy_is_an_error_reply_not_a_crash():
    with start(_BrokenPolicy()) as server, PolicyClient(port=server.port) as client:
        with pytest.raises(ServerError, match="the policy failed: RuntimeError: negative state"):
            client.infer({"state": np.full(8, -1.0)})
        with pytest.raises(ServerError, match="returned list without 'actions'"):
            client.infer({"state": np.full(8, 7.0)})
        assert np.all(client.infer({"state": np.full(8, 2.0)})["actions"] == 2.0)
        assert server.server.metrics.value("hotloop_requests_total", {"outcome": "policy_error"}) == 2
