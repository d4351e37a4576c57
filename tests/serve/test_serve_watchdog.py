"""The server's watchdog (`--deadline-ms`, `--fallback engine:TARGET`, `--stall-limit-ms`) over real HTTP
and websockets: a policy that stalls (it sleeps until the test releases it, at most 30 s), scraped on
`/metrics` and `/healthz` while it stalls and after."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import EchoPolicy, StateEchoPolicy, healthz
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.client import PolicyClient, ServerError
from hotloop.errors import ConfigError
from hotloop.serve.policies import serve_policy
from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread, check_fallback_engine

STALL_STATE = 9.0  # the observation that makes the policy stall
NAN_STATE = 5.0  # the observation that makes it answer NaN
LIST_STATE = 7.0  # the observation that makes it answer a list (no 'actions')


class StallingPolicy(StateEchoPolicy):
    """The echo policy, except that on STALL_STATE it sleeps until `release` is set (or 30 s pass) and
    on NAN_STATE it answers NaN."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.stalled = threading.Event()

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        value = float(obs["state"][0])
        if value == STALL_STATE:
            self.stalled.set()
            self.release.wait(timeout=30)
        if value == NAN_STATE:
            return {"actions": np.full((10, 8), np.nan, dtype=np.float32)}
        if value == LIST_STATE:
            return [1, 2, 3]  # type: ignore[return-value]
        return super().infer(obs)


class SmallEngine(StateEchoPolicy):
    """The fallback engine: a shorter chunk of -1, so its replies are unmistakable."""

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"actions": np.full((4, 8), -1.0, dtype=np.float32)}


def _server(policy: Any, fallback: Any = None, **config: Any) -> ServerThread:
    small = serve_policy("small", fallback) if fallback is not None else None
    return ServerThread(
        PolicyServer(serve_policy("stalling", policy), ServeConfig(port=0, **config), fallback=small)
    )


def _metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _state(value: float) -> dict[str, np.ndarray]:
    return {"state": np.full(8, value, dtype=np.float32)}


def _infer_in_thread(port: int, value: float) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def go() -> None:
        with PolicyClient(port=port) as client:
            out.append(client.infer(_state(value)))

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, out


def test_a_stall_switches_to_the_engine_and_healthz_and_metrics_say_so():
    policy = StallingPolicy()
    with _server(policy, SmallEngine(), deadline_ms=50, stall_limit_ms=200) as server:
        port = server.port
        assert healthz(port) == (200, "OK\n")
        with PolicyClient(port=port) as client:
            assert np.all(client.infer(_state(1.0))["actions"] == 1.0)  # in time: the main policy
            stalled = client.infer(_state(STALL_STATE))  # the deadline passes: the engine answers
            assert policy.stalled.is_set()
            assert stalled["fallback"] == "small" and np.all(stalled["actions"] == -1.0)
            assert stalled["actions"].shape == (4, 8)
            # The model is still asleep on that request: the next one goes to the engine at once.
            assert client.infer(_state(2.0))["fallback"] == "small"
            deadline = time.monotonic() + 10
            while healthz(port)[0] == 200:  # running past the 200 ms limit: unhealthy
                assert time.monotonic() < deadline, "/healthz never reported the stall"
                time.sleep(0.02)
            code, reason = healthz(port)
            assert code == 503 and "an inference has been running for" in reason
            assert "--stall-limit-ms of 200 ms" in reason
            during = _metrics(port)
            assert during[("hotloop_inference_running_seconds", ())] > 0.2
            assert during[("hotloop_deadline_misses_total", ())] == 1
            assert during[("hotloop_fallbacks_total", (("kind", "engine"),))] == 1
            assert during[("hotloop_fallback_returns_total", ())] == 0
            assert during[("hotloop_requests_total", (("outcome", "fallback"),))] == 2
            policy.release.set()
            deadline = time.monotonic() + 10
            while healthz(port)[0] != 200:
                assert time.monotonic() < deadline, "/healthz stayed unhealthy after the stall ended"
                time.sleep(0.02)
            back = client.infer(_state(3.0))  # the main policy, in time again: the server returns
            assert "fallback" not in back and np.all(back["actions"] == 3.0)
        after = _metrics(port)
        assert after[("hotloop_fallback_returns_total", ())] == 1
        # The fallback ran from the miss (the 50 ms deadline, plus the watchdog's wake-up) until the stalled
        # inference ended, which was after it had run `running` seconds: so at least running - 50 ms, less
        # a wake-up allowance (not a timing claim: a generous 100 ms of scheduling slack on a loaded box).
        running = during[("hotloop_inference_running_seconds", ())]
        assert after[("hotloop_fallback_seconds_total", ())] > running - 0.05 - 0.1
        assert after[("hotloop_inference_running_seconds", ())] == 0
        assert after[("hotloop_requests_total", (("outcome", "ok"),))] == 2


def test_a_fault_is_answered_by_the_engine_and_counted():
    with _server(StallingPolicy(), SmallEngine()) as server, PolicyClient(port=server.port) as client:
        reply = client.infer(_state(NAN_STATE))  # no deadline: the watchdog still catches the NaN
        assert reply["fallback"] == "small" and np.all(reply["actions"] == -1.0)
        assert np.all(client.infer(_state(1.0))["actions"] == 1.0)
        assert client.infer(_state(LIST_STATE))["fallback"] == "small"  # no 'actions': a fault too
        assert np.all(client.infer(_state(2.0))["actions"] == 2.0)
        scraped = _metrics(server.port)
    assert scraped[("hotloop_engine_faults_total", ())] == 2
    assert scraped[("hotloop_deadline_misses_total", ())] == 0
    assert scraped[("hotloop_fallbacks_total", (("kind", "engine"),))] == 2
    assert scraped[("hotloop_fallback_returns_total", ())] == 2


def test_without_an_engine_the_late_reply_still_comes_and_the_miss_is_counted():
    policy = StallingPolicy()
    with _server(policy, deadline_ms=50, stall_limit_ms=100) as server:
        thread, out = _infer_in_thread(server.port, STALL_STATE)
        assert policy.stalled.wait(timeout=10)
        deadline = time.monotonic() + 10
        while healthz(server.port)[0] == 200:
            assert time.monotonic() < deadline, "/healthz never reported the stall"
            time.sleep(0.02)
        assert _metrics(server.port)[("hotloop_fallbacks_total", (("kind", "hold"),))] == 1
        policy.release.set()
        thread.join(timeout=10)
        assert np.all(out[0]["actions"] == STALL_STATE) and "fallback" not in out[0]
        with PolicyClient(port=server.port) as client, pytest.raises(ServerError, match="non-finite actions"):
            client.infer(_state(NAN_STATE))
        scraped = _metrics(server.port)
        assert healthz(server.port) == (200, "OK\n")
    assert scraped[("hotloop_deadline_misses_total", ())] == 1
    assert scraped[("hotloop_engine_faults_total", ())] == 1
    assert scraped[("hotloop_fallbacks_total", (("kind", "hold"),))] == 2  # the miss, then the fault
    assert scraped[("hotloop_fallback_returns_total", ())] == 1  # the late chunk


def test_the_engine_must_read_and_answer_like_the_main_policy():
    with pytest.raises(ConfigError, match="--fallback engine:small reads observations"):
        check_fallback_engine(serve_policy("main", StateEchoPolicy()), serve_policy("small", EchoPolicy()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fallback", "hold"], "--fallback hold: the server cannot hold a robot"),
        (["--fallback", "engine"], "--fallback 'engine' names no engine"),
        (["--fallback", "engine:nope"], "--fallback engine:nope"),
        (["--deadline-ms", "0"], "--deadline-ms must be a positive number"),
        (["--stall-limit-ms", "-5"], "--stall-limit-ms must be a positive number"),
    ],
)
def test_bad_watchdog_options_are_one_line(args, message):
    result = CliRunner().invoke(app, ["serve", "toy:mlp", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
