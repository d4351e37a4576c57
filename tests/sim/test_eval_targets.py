"""`hotloop eval` runs every policy target in closed loop, through the adapter."""

import pytest

from hotloop.closedloop.pool import run_episodes
from hotloop.closedloop.workers import EpisodeJob, EpisodeRunner
from hotloop.errors import ConfigError


@pytest.mark.parametrize("target", ["pi05:tiny", "pi0:tiny", "toy:mlp", "demo:conveyor", "expert:scripted"])
def test_every_policy_target_runs_an_episode_in_closed_loop(target):
    # chunk with the default n = H/2: a handful of inferences per episode keeps this quick
    job = EpisodeJob(target=target, task="reach", difficulty=None, strategy="chunk", latency="fixed:0")
    records, interrupted = run_episodes(job, [0], workers=0)
    (record,) = records
    assert not interrupted and record["error"] is None
    assert record["inferences"] >= 1 and record["sim_time_s"] > 0
    if target == "expert:scripted":
        assert record["success"]  # the control: the loop can succeed when the policy is good


def test_a_policy_whose_needs_the_task_cannot_meet_is_refused_before_any_episode():
    job = EpisodeJob(
        target="demo:conveyor",
        task="reach",
        difficulty=None,
        strategy="sync",
        latency="fixed:0",
        policy_factory="fakes:side_camera",
    )
    with pytest.raises(ConfigError, match="cannot adapt fakes:side_camera on task 'reach'.*'side'"):
        EpisodeRunner(job)
    with pytest.raises(ConfigError, match="cannot adapt"):  # from a worker process: the same one line
        run_episodes(job, [0, 1], workers=1)
