"""`hotloop eval` checks --execute-steps / --trigger-remaining against the policy's chunk length before
loading anything, where the target declares that length, and names the real range for low values too
(issue 24, defect 8)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.targets import find_target


def _never_loaded(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the policy was loaded before its options were checked")


@pytest.mark.parametrize(
    "target,flags,message",
    [
        ("demo:conveyor", ["--strategy", "chunk", "--execute-steps", "17"], "--execute-steps must be in [1, 16] (got 17)"),
        ("demo:conveyor", ["--strategy", "chunk", "--execute-steps", "0"], "--execute-steps must be in [1, 16] (got 0)"),
        ("demo:conveyor", ["--strategy", "async", "--sweep-trigger", "4,16"], "--sweep-trigger must be in [0, 15] (got 16)"),
        ("demo:conveyor-act", ["--strategy", "rtc", "--trigger-remaining", "10"], "must be in [0, 9] (got 10): demo:conveyor-act's chunks hold 10 actions"),
        ("demo:conveyor-diffusion", ["--strategy", "chunk", "--execute-steps", "9"], "must be in [1, 8] (got 9)"),
        ("expert:scripted", ["--strategy", "async", "--trigger-remaining", "1"], "[0, 0] (got 1): expert:scripted's chunks hold 1 action"),
    ],
)  # fmt: skip
def test_chunk_options_are_checked_before_the_policy_loads(
    monkeypatch: pytest.MonkeyPatch, target: str, flags: list[str], message: str
) -> None:
    from hotloop.closedloop import workers

    monkeypatch.setattr(workers, "build_policy", _never_loaded)
    monkeypatch.setattr(workers, "EpisodeRunner", _never_loaded)
    res = CliRunner().invoke(app, ["eval", target, *flags, "--episodes", "1", "--workers", "0", "--quiet"])
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("error: ") and message in line, res.output


def test_a_low_value_names_the_range_where_the_length_is_known_only_after_loading() -> None:
    res = CliRunner().invoke(
        app, ["eval", "pi05:tiny", "--strategy", "chunk", "--execute-steps", "0", "--episodes", "1"]
    )
    assert res.exit_code == 2, res.output
    assert "--execute-steps must be from 1 to its chunk length for pi05:tiny's policy (got 0)" in res.output


@pytest.mark.parametrize("target", ["demo:conveyor-act", "demo:conveyor-smolvla", "expert:scripted"])
def test_the_declared_chunk_length_is_the_built_policys(target: str) -> None:
    """The early check refuses only what the policy would: its declared length is what it returns."""
    from hotloop.closedloop.workers import EpisodeJob, build_policy
    from hotloop.sim.tasks import make_task

    entry = find_target(target)
    declared = entry.declared_horizon(target)
    env = make_task("conveyor-pick")
    policy = build_policy(EpisodeJob(target, "conveyor-pick", None, "sync", "fixed:0"), env)
    obs, _ = env.reset(seed=0)
    policy.reset()
    assert declared is not None and len(policy.infer(obs)["actions"]) == declared
