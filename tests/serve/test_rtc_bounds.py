"""Every RTC key is bounded where a request is validated (issue 38, class 4): a client's absurd guidance
clip, previous actions or delay is that client's error reply and never reaches the engine (no fault, no
switch to the fallback); at the bounds, a real pi policy still samples finite chunks in every RTC mode."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.client import PolicyClient, ServerError
from hotloop.errors import ConfigError
from hotloop.realtime.rtc import (
    MAX_ACTION_MAGNITUDE,
    MAX_DELAY,
    MAX_GUIDANCE_WEIGHT,
    MAX_PREV_ROWS,
    MODES,
    guidance_inputs,
)
from hotloop.serve.policies import load_served_policy, serve_policy
from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread
from hotloop.serve.spec import zero_observation
from hotloop.targets import TargetOptions


def test_absurd_rtc_values_are_the_clients_error_and_the_bounds_still_sample_finite_chunks():
    served = load_served_policy("pi05:tiny", TargetOptions())
    small = serve_policy("small", served.policy)  # a fallback: a fault would switch to it
    good = zero_observation(served.observation_spec)
    width = served.observation_spec["rtc_prev_actions"].shape[1]
    prev = np.zeros((3, width), np.float32)
    absurd = {  # the values: each reached the policy and counted as an engine fault
        "'rtc_max_guidance_weight' is 1e+30": {
            **good,
            "rtc_prev_actions": prev,
            "rtc_max_guidance_weight": 1e30,
        },
        "'rtc_prev_actions' holds 3e+38": {**good, "rtc_prev_actions": np.full((3, width), 3e38, np.float32)},
        "'rtc_delay' is 1000000000000000": {**good, "rtc_prev_actions": prev, "rtc_delay": 10**15},
        "'rtc_prev_actions' has shape (1001,": {
            **good,
            "rtc_prev_actions": np.zeros((1001, width), np.float32),
        },
    }
    edge = np.full((MAX_PREV_ROWS, width), MAX_ACTION_MAGNITUDE, np.float32)
    edge[::2] *= -1
    config = ServeConfig(port=0, deadline_ms=600_000)
    with ServerThread(PolicyServer(served, config, fallback=small)) as server:
        with PolicyClient(port=server.port) as client:
            for needle, obs in absurd.items():
                with pytest.raises(ServerError, match=needle.replace("(", r"\(").replace("+", r"\+")):
                    client.infer(obs)
            for mode in MODES:  # at every bound at once: served by the policy itself, finite
                reply = client.infer(
                    {
                        **good,
                        "rtc_prev_actions": edge,
                        "rtc_delay": MAX_DELAY,
                        "rtc_max_guidance_weight": MAX_GUIDANCE_WEIGHT,
                        "rtc_mode": mode,
                    }
                )
                assert "fallback" not in reply and reply["rtc_guided"] is True
                assert np.isfinite(reply["actions"]).all()
        counters = server.server.watchdog.counters()
        assert (counters["faults"], counters["switches"]) == (0, 0)
        assert server.server.metrics.value("hotloop_requests_total", {"outcome": "rejected"}) == len(absurd)


def test_guidance_inputs_apply_the_same_bounds_in_process():
    prev = np.zeros((2, 4), np.float32)
    assert guidance_inputs({"rtc_prev_actions": prev, "rtc_delay": 2})[1:] == (2, 20.0)
    for bad, needle in (
        ({"rtc_max_guidance_weight": 1e30}, "'rtc_max_guidance_weight' is 1e+30"),
        ({"rtc_max_guidance_weight": float("nan")}, "'rtc_max_guidance_weight' is nan"),
        ({"rtc_delay": -1}, "'rtc_delay' is -1"),
        ({"rtc_prev_actions": np.full((2, 4), np.inf)}, "NaN or infinite"),
    ):
        with pytest.raises(ConfigError, match=needle.replace("+", r"\+")):
            guidance_inputs({"rtc_prev_actions": prev, **bad})


@pytest.mark.parametrize("value", ["1e30", "0", "nan"])
def test_an_absurd_guidance_weight_flag_is_one_line(value: str):
    res = CliRunner().invoke(app, ["eval", "demo:conveyor", "--strategy", "rtc", "--guidance-weight", value])
    assert res.exit_code == 2 and "--guidance-weight must be a number > 0 and at most 1000" in res.output
