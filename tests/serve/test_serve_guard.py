"""A non-finite action is never sent to a robot: the websocket server counts it as an engine fault even
without --deadline-ms or --fallback (the client gets an error reply, never NaN), and `GuardedPolicy`, the
same rule for a synchronous transport (the LeRobot gRPC server), answers from the fallback engine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from serve_helpers import StateEchoPolicy

from hotloop.client import PolicyClient, ServerError
from hotloop.errors import ConfigError
from hotloop.measure.live_metrics import LiveMetrics
from hotloop.serve.guard import GuardedPolicy, UnsafeActionsError, action_fault
from hotloop.serve.policies import serve_policy
from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread
from hotloop.serve.watchdog import ServerWatchdog


class NanOnFive(StateEchoPolicy):
    """Echoes the state; a state of 5 answers NaN, of 6 raises, of 7 refuses the input (ConfigError)."""

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        value = float(obs["state"][0])
        if value == 5.0:
            return {"actions": np.full((10, 8), np.nan, np.float32)}
        if value == 6.0:
            raise RuntimeError("the engine broke")
        if value == 7.0:
            raise ConfigError("state 7 is not a state this policy reads")
        return super().infer(obs)


class Constant(StateEchoPolicy):
    def __init__(self, value: float) -> None:
        self.value = value

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"actions": np.full((4, 8), self.value, np.float32)}


def _state(value: float) -> dict[str, np.ndarray]:
    return {"state": np.full(8, value, np.float32)}


def test_without_deadline_or_fallback_nan_is_an_error_reply_and_a_counted_fault():
    server = PolicyServer(serve_policy("nan", NanOnFive()), ServeConfig(port=0))
    with ServerThread(server) as thread, PolicyClient(port=thread.port) as client:
        with pytest.raises(ServerError, match=r"non-finite actions \(NaN or inf\): actions: 80 of 80 values"):
            client.infer(_state(5.0))
        assert np.all(client.infer(_state(2.0))["actions"] == 2.0)  # the connection goes on
    assert server.metrics.value("hotloop_engine_faults_total") == 1
    assert server.metrics.value("hotloop_requests_total", {"outcome": "policy_error"}) == 1


def test_action_fault_names_what_a_robot_must_not_get():
    assert action_fault({"actions": np.zeros((2, 3))}) is None
    assert action_fault([1, 2]) == "returned list without 'actions'"
    assert "dtype <U1" in str(action_fault({"actions": np.array(["a"])}))
    assert action_fault({"actions": np.array([[0.0, np.inf]])}) == (
        "non-finite actions (NaN or inf): actions: 1 of 2 values"
    )


def _guarded(fallback: Any = None) -> tuple[GuardedPolicy, LiveMetrics]:
    metrics = LiveMetrics(read_machine=False)
    watchdog = ServerWatchdog(None, "engine" if fallback is not None else "hold", metrics)
    return GuardedPolicy(NanOnFive(), watchdog, fallback), metrics


def test_guarded_policy_answers_from_the_fallback_and_counts_the_fault():
    guarded, metrics = _guarded(Constant(-1.0))
    action, source = guarded.infer(_state(1.0))
    assert source == "policy" and np.all(action["actions"] == 1.0)
    for bad in (5.0, 6.0):  # NaN, then an exception
        action, source = guarded.infer(_state(bad))
        assert source == "fallback" and np.all(action["actions"] == -1.0)
    assert guarded.watchdog.counters()["faults"] == 2
    assert metrics.value("hotloop_engine_faults_total") == 2
    with pytest.raises(ConfigError, match="state 7"):  # the client's error: no fault, no fallback
        guarded.infer(_state(7.0))
    assert guarded.watchdog.counters()["faults"] == 2


def test_guarded_policy_never_returns_non_finite_actions():
    guarded, _ = _guarded()
    with pytest.raises(UnsafeActionsError, match="no fallback engine"):
        guarded.infer(_state(5.0))
    guarded, _ = _guarded(Constant(float("nan")))
    with pytest.raises(UnsafeActionsError, match="the fallback engine too"):
        guarded.infer(_state(5.0))
