"""The shipped demo policies over real websockets: `demo:conveyor-vision` with both of its cameras, and the
real-time chunking keys a robot-side `--strategy rtc` scheduler sends (the rest of the executing chunk, the
delay, the mode), answered exactly as the local policy answers them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hotloop.client import PolicyClient, ServerError
from hotloop.realtime.rtc import DELAY_KEY, GUIDED_KEY, MODE_KEY, PREV_ACTIONS_KEY
from hotloop.serve.policies import load_served_policy
from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread
from hotloop.targets import TargetOptions


def _env_observation(policy: Any, seed: int = 3) -> dict[str, Any]:
    from hotloop.demos.conveyor_vision import make_demo_task

    env = make_demo_task(policy.meta)
    try:
        obs, _ = env.reset(seed=seed)
    finally:
        env.close()
    return obs


def _served(target: str) -> tuple[Any, Any]:
    served = load_served_policy(target, TargetOptions())
    from hotloop.demos.conveyor import build_demo

    return served, build_demo(target, TargetOptions())  # a second, local copy to compare with


def test_conveyor_vision_serves_both_cameras() -> None:
    served, local = _served("demo:conveyor-vision")
    spec = served.observation_spec
    assert spec["images/top"].shape == spec["images/wrist"].shape == (64, 64, 3)
    obs = _env_observation(local)
    expected = local.infer(obs)["actions"]
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
    ):
        got = client.infer(obs)["actions"]
        without_wrist = {**obs, "images": {"top": obs["images"]["top"]}}
        with pytest.raises(ServerError, match="missing key.*'images/wrist'"):
            client.infer(without_wrist)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_rtc_keys_reach_the_served_policy() -> None:
    served, local = _served("demo:conveyor")
    assert served.observation_spec[PREV_ACTIONS_KEY].shape == (-1, 4)
    obs = _env_observation(local)
    plain = local.infer(obs)["actions"]
    # The rest of an executing chunk that is off by 3 cm: guidance pulls the new chunk's start toward it.
    prev = plain[2:].copy()
    prev[:, :3] += 0.03
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
    ):
        for mode in ("guided", "prefix", "soft-prefix"):
            rtc_obs = {**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2, MODE_KEY: mode}
            reply = client.infer(rtc_obs)
            expected = local.infer(rtc_obs)
            assert bool(reply[GUIDED_KEY]) and (mode == "guided" or reply[MODE_KEY] == mode)
            np.testing.assert_allclose(reply["actions"], expected["actions"], rtol=1e-5, atol=1e-5)
            assert not np.allclose(reply["actions"], plain, atol=1e-4)  # the keys changed the chunk
        with pytest.raises(ServerError, match="'rtc_delay' has dtype float64; send int64"):
            client.infer({**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2.5})
        with pytest.raises(ServerError, match="'rtc_prev_actions' has shape"):
            client.infer({**obs, PREV_ACTIONS_KEY: prev[:, :3]})
        assert client.infer(obs)["actions"].shape == plain.shape  # and the connection still serves


def test_a_draft_is_checked_by_the_served_policy() -> None:
    """`--strategy draft` on a robot: the executing rows go out as a draft with the tolerance, the reply is
    the local policy's (the accepted rows, or the full path's chunk) with its statistics."""
    from hotloop.realtime.draft import DRAFT_KEY, TOLERANCE_KEY

    served, local = _served("demo:conveyor")
    assert TOLERANCE_KEY in served.observation_spec
    obs = _env_observation(local)
    plain = local.infer(obs)["actions"]
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
    ):
        for prev in (plain, plain[2:] + np.array([0.05, 0.0, 0.0, 0.0], dtype=np.float32)):
            draft_obs = {**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2, MODE_KEY: "draft", TOLERANCE_KEY: 0.15}
            reply, expected = client.infer(draft_obs), local.infer(draft_obs)
            assert bool(reply[GUIDED_KEY]) and reply[MODE_KEY] == "draft"
            assert dict(reply[DRAFT_KEY]) == expected[DRAFT_KEY]
            np.testing.assert_allclose(reply["actions"], expected["actions"], rtol=1e-5, atol=1e-5)
        with pytest.raises(ServerError, match="'draft_tolerance'.*must be > 0"):
            client.infer({**obs, PREV_ACTIONS_KEY: plain, MODE_KEY: "draft", TOLERANCE_KEY: -1.0})


def test_a_compiled_demo_artifact_refuses_rtc_instead_of_sampling_eagerly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """RTC keys sent to a compiled demo artifact: locally the answer carries no `rtc_guided` (the engine's
    plain chunk, bit for bit), over the wire the keys are unknown; never the eager model behind it."""
    from typer.testing import CliRunner

    from hotloop.cli import app
    from hotloop.runtime.engine import Engine
    from hotloop.runtime.policy import engine_policy

    art = tmp_path / "art"
    res = CliRunner().invoke(
        app,
        ["compile", "demo:conveyor", "--budget-ms", "1e5", "--backends", "eager", "--precisions", "fp32", "--variants", "plain",
         "--iters", "2", "--warmup", "0", "--threads", "1", "--quiet", "-o", str(art)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    policy = engine_policy(Engine.load(art, warmup=1))
    obs = _env_observation(policy)
    plain = policy.infer(obs)
    prev = plain["actions"][2:] + 0.03
    with_keys = policy.infer({**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2})
    assert GUIDED_KEY not in with_keys
    np.testing.assert_array_equal(with_keys["actions"], plain["actions"])
    served = load_served_policy(str(art), TargetOptions())
    assert PREV_ACTIONS_KEY not in served.observation_spec
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
        pytest.raises(ServerError, match="unknown key.*'rtc_delay'"),
    ):
        client.infer({**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2})
