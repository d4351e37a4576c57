"""One client cannot hurt the others (issue 24, defect 4), over real websockets: bad input to a real pi
policy is that client's error reply, never an engine fault nor a switch to the fallback engine; a message
over the limit is refused from its header, before its payload is read; connections are capped; a
client's words come back clipped in replies and log lines; its values print no numpy warnings."""

from __future__ import annotations

import struct
import time
import warnings
from typing import Any

import numpy as np
import pytest
from serve_helpers import StateEchoPolicy, healthz, start
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect

from hotloop.client import PolicyClient, ServerError, codec
from hotloop.errors import ConfigError
from hotloop.serve.policies import load_served_policy, serve_policy
from hotloop.serve.server import ERROR_CHARS, PolicyServer, ServeConfig, ServerThread
from hotloop.serve.spec import zero_observation
from hotloop.targets import TargetOptions

HUGE = "x" * 1_000_000


def _wait_for(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_bad_input_to_a_real_pi_policy_is_the_clients_error_not_an_engine_fault():
    served = load_served_policy("pi05:tiny", TargetOptions())
    small = serve_policy("small", served.policy)  # a fallback engine reading the same spec
    good = zero_observation(served.observation_spec)
    width = served.observation_spec["rtc_prev_actions"].shape[1]
    prev = np.zeros((3, width), np.float32)
    bad = {  # each failed inside the policy before (an engine fault, the server switched to "small")
        "'rtc_mode' is 'fast'": {**good, "rtc_prev_actions": prev, "rtc_mode": "fast"},
        "'rtc_prev_actions' has no rows": {**good, "rtc_prev_actions": prev[:0]},
        "'state' holds 1e+300, beyond the range of float32": {**good, "state": np.full(9, 1e300)},
        # ... and these were accepted: wrapped to pixel 0, a negative delay and guidance clip.
        "'images' holds values in [256, 256]": {**good, "images": np.full((1, 56, 56, 3), 256, np.uint16)},
        "'rtc_delay' is -2": {**good, "rtc_prev_actions": prev, "rtc_delay": -2},
        "'rtc_max_guidance_weight' is -5": {
            **good,
            "rtc_prev_actions": prev,
            "rtc_max_guidance_weight": -5.0,
        },
    }
    config = ServeConfig(port=0, deadline_ms=60_000)
    with ServerThread(PolicyServer(served, config, fallback=small)) as server, warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy warning from a client's value (overflow in cast) fails
        with PolicyClient(port=server.port) as client:
            for needle, obs in bad.items():
                with pytest.raises(ServerError, match=needle.replace("[", r"\[").replace("+", r"\+")):
                    client.infer(obs)
            reply = client.infer({**good, "rtc_prev_actions": prev, "rtc_delay": 1, "rtc_mode": "prefix"})
        assert "fallback" not in reply and reply["rtc_guided"] is True
        watchdog = server.server.watchdog
        assert watchdog is not None
        assert (watchdog.counters()["faults"], watchdog.counters()["switches"]) == (0, 0)
        metrics = server.server.metrics
        assert metrics.value("hotloop_requests_total", {"outcome": "rejected"}) == len(bad)


class RefusingPolicy(StateEchoPolicy):
    """Refuses (ConfigError) a state of 3 echoing the client's whole prompt, as a family names bad input;
    answers NaN on a state of 5."""

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        if float(obs["state"][0]) == 3.0:
            raise ConfigError(f"state 3 is refused; the client said {HUGE}")
        if float(obs["state"][0]) == 5.0:
            return {"actions": np.full((10, 8), np.nan, np.float32)}
        return super().infer(obs)


def test_a_policys_refusal_answers_that_client_clipped_and_is_no_fault(caplog):
    small = serve_policy("small", RefusingPolicy())
    policy = serve_policy("main", RefusingPolicy())
    with (
        ServerThread(PolicyServer(policy, ServeConfig(port=0, deadline_ms=60_000), fallback=small)) as server,
        PolicyClient(port=server.port) as client,
        PolicyClient(port=server.port) as other,
    ):
        with pytest.raises(ServerError, match="state 3 is refused") as refused:
            client.infer({"state": np.full(8, 3.0)})
        assert len(str(refused.value)) <= ERROR_CHARS
        assert np.all(other.infer({"state": np.full(8, 2.0)})["actions"] == 2.0)
        assert server.server.watchdog is not None and server.server.watchdog.counters()["faults"] == 0
        # The main engine's NaN is a fault; the fallback's NaN too is an error reply, never sent as actions.
        with pytest.raises(ServerError, match="the fallback engine failed too: non-finite actions"):
            client.infer({"state": np.full(8, 5.0)})
        # Wire errors that repeat a client's words: a 1 MB key, a 1 MB dtype string.
        ws = client._ws
        assert ws is not None
        ws.send(codec.packb({"state": np.ones(8), HUGE: 1}))
        ws.send(codec.packb({"state": {b"__ndarray__": True, b"data": b"", b"dtype": HUGE, b"shape": [0]}}))
        for needle in ("unknown key(s) 'xxx", "unknown dtype 'xxx"):
            reply = ws.recv(timeout=10)
            assert needle in reply and len(reply) <= ERROR_CHARS, reply[:300]
    assert all(len(r.getMessage()) <= ERROR_CHARS + 100 for r in caplog.records), "a log line echoes too much"
    assert any("refused by the policy" in r.getMessage() for r in caplog.records)


def test_an_oversized_message_is_refused_from_its_header_and_connections_are_capped():
    limit = 64 * 1024
    with start(StateEchoPolicy(), max_message_bytes=limit, max_connections=2) as server:
        # A frame header announcing limit + 1 bytes, and not one byte of payload: the server closes the
        # connection with 1009 at once, so it never waits to buffer the payload.
        with connect(server.url) as big:
            big.recv(timeout=10)
            big.socket.sendall(bytes([0x82, 0x80 | 127]) + struct.pack("!Q", limit + 1) + b"\0\0\0\0")
            with pytest.raises(ConnectionClosedError) as closed:
                big.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        # The hotloop client refuses to send it at all (it knows the limit from the metadata).
        with PolicyClient(port=server.port) as client:
            assert np.all(client.infer({"state": np.full(8, 4.0)})["actions"] == 4.0)  # a robot, not idle
            with pytest.raises(ServerError, match=f"over the server's limit of {limit}"):
                client.infer({"state": np.ones(8), "blob": np.zeros(limit, np.uint8)})
            with PolicyClient(port=server.port) as second:
                assert np.all(second.infer({"state": np.full(8, 5.0)})["actions"] == 5.0)  # a robot, not idle
                with pytest.raises(InvalidStatus) as full:
                    connect(server.url)
                assert full.value.response.status_code == 503
                assert b"--max-connections of 2" in full.value.response.body
                assert healthz(server.port) == (200, "OK\n")  # at the cap, health checks still answer
                assert np.all(second.infer({"state": np.full(8, 6.0)})["actions"] == 6.0)
            _wait_for(lambda: server.server.metrics.value("hotloop_connections") == 1)
            with PolicyClient(port=server.port) as third:  # a slot freed: a new client gets in
                assert np.all(third.infer({"state": np.full(8, 7.0)})["actions"] == 7.0)
        assert server.server.metrics.value("hotloop_requests_total", {"outcome": "refused"}) == 1
