"""SmolVLA as a robot policy: closed-loop episodes through the task adapter (sync, rtc-soft; the tiny random
checkpoint fails the task: running is the point) and the openpi-compatible server with a text prompt, the RTC
keys over the wire, and bad input answered by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hotloop.realtime.rtc import DELAY_KEY, GUIDED_KEY, MODE_KEY, PREV_ACTIONS_KEY
from hotloop.targets import TargetOptions, find_target


@pytest.mark.parametrize("strategy", ["sync", "rtc-soft"])
def test_an_episode_runs_in_closed_loop(checkpoint: Path, strategy: str) -> None:
    from hotloop.closedloop.pool import run_episodes
    from hotloop.closedloop.workers import EpisodeJob

    job = EpisodeJob(
        target=str(checkpoint),
        task="reach",
        difficulty=None,
        strategy=strategy,
        latency="fixed:50",
        threads=1,
    )
    records, interrupted = run_episodes(job, [0], workers=0)
    (record,) = records
    assert not interrupted and record["error"] is None and record["inferences"] >= 2


def test_the_named_target_runs_in_closed_loop() -> None:
    from hotloop.closedloop.pool import run_episodes
    from hotloop.closedloop.workers import EpisodeJob

    job = EpisodeJob(
        target="smolvla:tiny", task="reach", difficulty=None, strategy="chunk", latency="fixed:0", threads=1
    )
    (record,), _ = run_episodes(job, [0], workers=0)
    assert record["error"] is None and record["inferences"] >= 1


def _obs(seed: int = 0) -> dict[str, Any]:
    g = np.random.default_rng(seed)
    return {"images": {"top": g.integers(0, 255, (24, 40, 3), dtype=np.uint8),
                       "wrist": g.integers(0, 255, (24, 40, 3), dtype=np.uint8)},
            "state": g.normal(size=10).astype(np.float32), "prompt": "w5 w9 w12"}  # fmt: skip


def test_served_with_a_text_prompt_and_the_rtc_keys(checkpoint: Path) -> None:
    from hotloop.client import PolicyClient, ServerError
    from hotloop.serve.policies import load_served_policy
    from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread

    served = load_served_policy(str(checkpoint), TargetOptions())
    spec = served.observation_spec
    assert spec["images/top"].shape == (24, 40, 3) and spec["prompt"].dtype == "str"
    assert spec[PREV_ACTIONS_KEY].shape == (-1, 4)
    local = find_target(str(checkpoint)).build_policy(str(checkpoint), TargetOptions())
    obs = _obs()
    plain = local.infer(obs)["actions"]
    prev = plain[2:].copy() + 0.1
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        PolicyClient(port=server.port) as client,
    ):
        served.policy.reset()
        np.testing.assert_allclose(client.infer(obs)["actions"], plain, atol=1e-6)
        other = client.infer({**obs, "prompt": "w30 w31"})["actions"]
        assert not np.allclose(other, plain, atol=1e-4)  # the text reaches the model
        for mode in ("guided", "prefix", "soft-prefix"):
            rtc_obs = {**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2, MODE_KEY: mode}
            served.policy.reset()
            local.reset()
            reply = client.infer(rtc_obs)
            assert bool(reply[GUIDED_KEY]) and reply[MODE_KEY] == mode
            np.testing.assert_allclose(reply["actions"], local.infer(rtc_obs)["actions"], atol=1e-6)
        with pytest.raises(ServerError, match="missing key.*'images/wrist'"):
            client.infer({**obs, "images": {"top": obs["images"]["top"]}})
        with pytest.raises(ServerError, match="max_length 12"):
            client.infer({**obs, "prompt": " ".join(["w5"] * 20)})
        assert client.infer(obs)["actions"].shape == (10, 4)  # and the connection still serves
