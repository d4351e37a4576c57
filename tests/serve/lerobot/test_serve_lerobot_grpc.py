"""The gRPC server for LeRobot's wire with what no stock client sends: pickles that would run a
command, object arrays, oversized or unordered payloads, calls out of order, a wrong API key, a policy
that fails; and the rtc-soft inputs the server derives from what it sent. Each is a gRPC status naming
the problem and at most one log line; the server keeps serving."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Any

import fake_lerobot
import numpy as np
import pytest
from lerobot_helpers import RawClient
from standin_frames import lerobot_features

from hotloop.policy_spec import ArraySpec
from hotloop.realtime.rtc import rtc_observation_spec
from hotloop.serve.lerobot import wire
from hotloop.serve.lerobot.execution import ExecutionConfig
from hotloop.serve.lerobot.instructions import served_target
from hotloop.serve.lerobot.server import LeRobotServer, LeRobotServerThread
from hotloop.serve.lerobot.servicer import LeRobotServeConfig
from hotloop.serve.policies import serve_policy

HORIZON, WIDTH = 10, 4


class RecordingPolicy:
    """Answers a chunk whose rows count up from the state's first entry; records what it was given;
    takes the RTC keys (and answers soft-prefix) like a flow policy; raises on a state of -1."""

    observation_spec = {
        "images/top": ArraySpec((64, 64, 3), "uint8"),
        "state": ArraySpec((10,), "float32"),
        **rtc_observation_spec(WIDTH),
    }

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def reset(self) -> None:
        pass

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(obs)
        if obs["state"][0] == -1:
            raise RuntimeError("the engine broke")
        base = float(obs["state"][0])
        actions = base + np.arange(HORIZON, dtype=np.float32)[:, None] + np.zeros((1, WIDTH), np.float32)
        out: dict[str, Any] = {"actions": actions}
        if "rtc_prev_actions" in obs:
            out["rtc_mode"] = obs["rtc_mode"]
        return out


@pytest.fixture
def server(request):
    policy = RecordingPolicy()
    options = getattr(request, "param", {})
    served = serve_policy("toy", policy)
    policy.seen.clear()
    config = LeRobotServeConfig(
        port=0,
        api_key=options.get("api_key"),
        max_message_bytes=options.get("max_message_bytes", 16 * 2**20),
        max_sessions=options.get("max_sessions", 16),
        execution=ExecutionConfig(strategy=options.get("strategy", "chunk"), fps=10.0, obs_wait_s=0.5),
    )
    with LeRobotServerThread(LeRobotServer(served_target("toy", served), config)) as thread:
        yield thread, policy


def _instructions(monkeypatch, **changes: Any) -> bytes:
    lr = fake_lerobot.install(monkeypatch)
    fields = dict(policy_type="hotloop", pretrained_name_or_path="toy", lerobot_features=lerobot_features(10, "top:64x64"),
                  actions_per_chunk=HORIZON) | changes  # fmt: skip
    return wire.encode_bytes_message(pickle.dumps(lr.RemotePolicyConfig(**fields)))


def _observation(
    monkeypatch, timestep: int, first: float = 0.0, must_go: bool = False, **extra: Any
) -> bytes:
    lr = fake_lerobot.install(monkeypatch)
    obs = {f"j{i}.pos": (first if i == 0 else 0.0) for i in range(10)} | {
        "top": np.zeros((64, 64, 3), np.uint8),
        "task": "",
    }
    obs.update(extra)
    return pickle.dumps(
        lr.TimedObservation(timestamp=1.0, timestep=timestep, observation=obs, must_go=must_go)
    )


def _connect(thread: Any, monkeypatch: Any, metadata: tuple[tuple[str, str], ...] = ()) -> RawClient:
    client = RawClient(thread.address(), metadata)
    assert client.call("Ready", b"")[0] == "OK"
    assert client.call("SendPolicyInstructions", _instructions(monkeypatch))[0] == "OK"
    return client


def _chunk(client: RawClient) -> list[Any]:
    code, details, reply = client.call("GetActions", b"")
    assert code == "OK", details
    return pickle.loads(wire.decode_bytes_message(reply)) if reply else []


def _rejected(thread: Any, reason: str) -> float:
    return thread.server.metrics.value("hotloop_rejected_total", {"reason": reason})


class _RunsCommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_a_command_is_refused_and_the_server_keeps_serving(
    server, monkeypatch, tmp_path
):
    thread, policy = server
    marker = tmp_path / "created-by-the-pickle"
    client = RawClient(thread.address())
    assert client.call("Ready", b"")[0] == "OK"
    code, details, _ = client.call(
        "SendPolicyInstructions", wire.encode_bytes_message(pickle.dumps(_RunsCommand(marker)))
    )
    assert code == "INVALID_ARGUMENT" and "does not load" in details and "system" in details
    client = _connect(thread, monkeypatch)
    code, details, _ = client.observation(
        _observation(monkeypatch, 0, must_go=True, evil=_RunsCommand(marker))
    )
    assert code == "INVALID_ARGUMENT" and "system" in details
    assert not marker.exists() and _rejected(thread, "pickle") == 2
    # Still serving, this client included.
    assert client.observation(_observation(monkeypatch, 0, first=2.0, must_go=True))[0] == "OK"
    chunk = _chunk(client)
    assert [a.get_timestep() for a in chunk] == list(range(HORIZON)) and float(
        chunk[3].get_action()[0]
    ) == 5.0
    assert not marker.exists()


def test_object_arrays_missing_keys_and_calls_out_of_order_are_refused_by_name(server, monkeypatch):
    thread, _ = server
    client = RawClient(thread.address())
    assert client.call("Ready", b"")[0] == "OK"
    code, details, _ = client.observation(_observation(monkeypatch, 0, must_go=True))
    assert code == "FAILED_PRECONDITION" and "SendPolicyInstructions first" in details
    client = _connect(thread, monkeypatch)
    for extra, message in [
        ({"top": np.array([[1, "a"]], dtype=object)}, "dtype 'O"),
        ({"top": np.zeros((32, 64, 3), np.uint8)}, "camera 'top' has shape"),
        ({"j4.pos": "x"}, "'j4.pos' is str"),
        ({"j2.pos": float("nan")}, "NaN"),
    ]:
        code, details, _ = client.observation(_observation(monkeypatch, 0, must_go=True, **extra))
        assert code == "INVALID_ARGUMENT" and message in details, details
    code, details, _ = client.call(
        "SendObservations", [wire.encode_chunk(wire.Chunk(wire.TRANSFER_BEGIN, b"x"))]
    )
    assert code == "INVALID_ARGUMENT" and "before TRANSFER_END" in details
    code, details, _ = client.call("SendObservations", [b"\xff\xff"])
    assert code == "INVALID_ARGUMENT" and "truncated varint" in details
    code, details, _ = client.call("SendPolicyInstructions", _instructions(monkeypatch, actions_per_chunk=50))
    assert code == "INVALID_ARGUMENT" and "between 1 and 10" in details


@pytest.mark.parametrize("server", [{"max_message_bytes": 2**20}], indirect=True)
def test_an_observation_over_the_limit_is_refused_before_it_is_buffered(server, monkeypatch):
    thread, _ = server
    client = _connect(thread, monkeypatch)
    big = _observation(monkeypatch, 0, must_go=True, extra=np.zeros(3 * 2**20, np.uint8))
    code, details, _ = client.observation(big)
    assert code == "RESOURCE_EXHAUSTED" and "--max-message-mb" in details
    assert _rejected(thread, "too_large") == 1
    assert client.observation(_observation(monkeypatch, 0, must_go=True))[0] == "OK"


@pytest.mark.parametrize("server", [{"api_key": "s3cret"}], indirect=True)
def test_with_an_api_key_every_call_needs_it_in_the_metadata(server, monkeypatch):
    thread, _ = server
    code, details, _ = RawClient(thread.address()).call("Ready", b"")
    assert code == "UNAUTHENTICATED" and "authorization: Api-Key" in details
    wrong = RawClient(thread.address(), (("authorization", "Api-Key nope"),)).call("Ready", b"")
    assert wrong[0] == "UNAUTHENTICATED" and _rejected(thread, "unauthenticated") == 2
    client = _connect(thread, monkeypatch, (("authorization", "Api-Key s3cret"),))
    assert (
        client.observation(_observation(monkeypatch, 0, must_go=True))[0] == "OK"
        and len(_chunk(client)) == HORIZON
    )


def test_a_failing_policy_is_that_requests_error_and_the_timestep_may_run_again(server, monkeypatch):
    thread, _ = server
    client = _connect(thread, monkeypatch)
    assert client.observation(_observation(monkeypatch, 4, first=-1.0, must_go=True))[0] == "OK"
    code, details, _ = client.call("GetActions", b"")
    assert code == "INTERNAL" and "the engine broke" in details
    # The stock client re-sends the same timestep without must_go (its queue never refilled): it runs.
    assert client.observation(_observation(monkeypatch, 4, first=1.0))[0] == "OK"
    assert [a.get_timestep() for a in _chunk(client)][:2] == [4, 5]
    failed = thread.server.metrics.value("hotloop_lerobot_observations_total", {"outcome": "failed"})
    assert failed == 1


def test_clients_are_apart_and_ready_resets_only_its_own(server, monkeypatch):
    thread, _ = server
    a, b = _connect(thread, monkeypatch), _connect(thread, monkeypatch)
    assert a.observation(_observation(monkeypatch, 0, first=1.0, must_go=True))[0] == "OK"
    assert b.observation(_observation(monkeypatch, 0, first=7.0, must_go=True))[0] == "OK"
    assert float(_chunk(b)[0].get_action()[0]) == 7.0 and float(_chunk(a)[0].get_action()[0]) == 1.0
    assert len(thread.server.servicer.sessions) == 2
    assert b.call("Ready", b"")[0] == "OK"  # b starts over; a keeps its instructions
    assert a.observation(_observation(monkeypatch, 1, first=2.0))[0] == "OK" and len(_chunk(a)) == HORIZON
    assert b.observation(_observation(monkeypatch, 1))[0] == "FAILED_PRECONDITION"


@pytest.mark.parametrize("server", [{"max_sessions": 1}], indirect=True)
def test_clients_past_max_connections_are_refused_until_one_leaves(server, monkeypatch):
    thread, _ = server
    first = _connect(thread, monkeypatch)
    code, details, _ = RawClient(thread.address()).call("Ready", b"")
    assert (
        code == "RESOURCE_EXHAUSTED" and "--max-connections" in details and _rejected(thread, "sessions") == 1
    )
    assert first.call("Ready", b"")[0] == "OK"  # the client with the session may start over


@pytest.mark.parametrize("server", [{"strategy": "rtc-soft"}], indirect=True)
def test_rtc_soft_conditions_the_next_chunk_on_what_the_client_still_executes(server, monkeypatch):
    thread, policy = server
    client = _connect(thread, monkeypatch)
    assert client.observation(_observation(monkeypatch, 0, first=10.0, must_go=True))[0] == "OK"
    first = _chunk(client)
    assert "rtc_prev_actions" not in policy.seen[-1]  # nothing executing yet
    assert client.observation(_observation(monkeypatch, 3, first=20.0))[0] == "OK"
    second = _chunk(client)
    given = policy.seen[-1]
    # Rows for timesteps 3..9 of the first chunk (what the client's queue holds from the observation on).
    expected = np.stack([a.get_action().numpy() for a in first])[3:]
    np.testing.assert_array_equal(given["rtc_prev_actions"], expected)
    assert given["rtc_mode"] == "soft-prefix" and int(given["rtc_delay"]) >= 0
    assert [a.get_timestep() for a in second][0] == 3
    # The third sees the client's weighted average of the two where they overlapped (timesteps 3..9).
    assert client.observation(_observation(monkeypatch, 6, first=30.0))[0] == "OK"
    _chunk(client)
    merged = 0.3 * expected[3:] + 0.7 * np.stack([a.get_action().numpy() for a in second])[3:7]
    np.testing.assert_allclose(policy.seen[-1]["rtc_prev_actions"][:4], merged, rtol=1e-6)


class SlowPolicy(RecordingPolicy):
    """RecordingPolicy that stalls on a state of -2 (a missed deadline) once served."""

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        if obs["state"][0] == -2:
            time.sleep(0.5)
        return super().infer(obs)


class FallbackPolicy(RecordingPolicy):
    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {"actions": np.full((HORIZON // 2, WIDTH), 99.0, np.float32)}


def test_a_missed_deadline_is_answered_by_the_fallback_engine(monkeypatch):
    served, small = serve_policy("toy", SlowPolicy()), serve_policy("small", FallbackPolicy())
    config = LeRobotServeConfig(port=0, execution=ExecutionConfig(obs_wait_s=0.5))
    server = LeRobotServer(served_target("toy", served), config, deadline_ms=100, fallback=small)
    with LeRobotServerThread(server) as thread:
        client = _connect(thread, monkeypatch)
        assert client.observation(_observation(monkeypatch, 0, first=-2.0, must_go=True))[0] == "OK"
        chunk = _chunk(client)  # the main policy stalls past 100 ms: the small engine's chunk goes out
        assert len(chunk) == HORIZON // 2 and float(chunk[0].get_action()[0]) == 99.0
        assert server.live.value("hotloop_requests_total", {"outcome": "fallback"}) == 1
        assert server.live.value("hotloop_deadline_misses_total") == 1
        time.sleep(0.6)  # the stale inference ends; the next in time returns to the main policy
        assert client.observation(_observation(monkeypatch, 1, first=3.0))[0] == "OK"
        assert float(_chunk(client)[0].get_action()[0]) == 3.0
