"""The observation history in closed loop: the control loop shows a policy with the `observe` hook every
control period's observation before any inference of that period (sim and robot runners alike, sync
and async), so the chunk is conditioned on the previous period's observation, as LeRobot's select_action
loop conditions it; `hotloop eval CKPT` runs under sync and async."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.targets import TargetOptions, find_target

runner = CliRunner()


class Spy:
    """A Diffusion policy wrapper seen through a log: the tick of every observation it is shown, and at
    every inference the ticks of the frames its history holds."""

    def __init__(self, inner: Any, env: Any) -> None:
        self.inner, self.env = inner, env
        self.observed: list[tuple[int, torch.Tensor]] = []  # (tick, the state frame pushed then)
        self.inferences: list[tuple[int, list[int]]] = []  # (tick, ticks of the history's frames)

    @property
    def spec(self) -> Any:
        return self.inner.spec

    def reset(self) -> None:
        self.inner.reset()
        self.observed.clear()
        self.inferences.clear()

    def observe(self, obs: dict[str, Any]) -> None:
        self.inner.observe(obs)
        self.observed.append((self.env.tick, self.inner.history["observation.state"][-1]))

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        out = self.inner.infer(obs)
        ticks = []
        for frame in self.inner.history["observation.state"]:
            match = [t for t, f in self.observed if f is frame]  # the very tensor observed then
            assert match, "the history holds a frame the policy was never shown"
            ticks.append(match[-1])
        self.inferences.append((self.env.tick, ticks))
        return out  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def env():  # type: ignore[no-untyped-def]
    from hotloop.sim.tasks import make_task

    e = make_task("reach")
    yield e
    e.close()


@pytest.mark.parametrize(
    ("strategy", "latency_ms"), [("sync", 0), ("sync", 120), ("async", 0), ("async", 120)]
)
def test_each_chunk_sees_the_previous_periods_observation(
    tiny_ckpt: Path, env: Any, strategy: str, latency_ms: int
) -> None:
    from hotloop.closedloop.adapter import adapt
    from hotloop.closedloop.evaluator import run_episode
    from hotloop.closedloop.latency import parse_latency
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    inner = find_target(str(tiny_ckpt)).build_policy(str(tiny_ckpt), TargetOptions())
    spy = Spy(inner, env)
    policy = adapt(spy, env.task_spec)
    assert hasattr(policy, "observe")
    rec = run_episode(
        env,
        policy,
        lambda h: make_strategy(strategy, StrategyConfig(h)),
        parse_latency(f"fixed:{latency_ms}"),
        3,
        trace=True,
    )
    period = env.config.ticks_per_control
    assert rec["error"] is None and rec["inferences"] == len(spy.inferences) >= 3
    assert spy.inferences[0] == (0, [0, 0])  # the first observation fills the queue (LeRobot's reset)
    observed = [t for t, _ in spy.observed]
    spacings = []
    for tick, frames in spy.inferences[1:]:
        # the newest frame is this decision's, the one before it the previous decision's
        previous = max(t for t in observed if t < tick)
        assert frames == [previous, tick], (strategy, latency_ms, tick, frames)
        spacings.append(tick - previous)
    # While the robot executes a chunk the decisions are its actions' periods: one period apart. Only an
    # async chunk that arrives mid-period (a hold until its next action) makes one decision off the grid.
    assert spacings.count(period) >= len(spacings) - (1 if strategy == "async" and latency_ms else 0)
    # every commanded segment began with an observation (one per control decision, never two)
    assert observed == sorted(set(observed))
    assert set(observed) >= {start for start, _, _, _ in rec["trace"]}


def test_a_policy_without_the_hook_is_observed_only_when_it_infers(env: Any) -> None:
    from hotloop.closedloop.adapter import AdaptedPolicy, adapt
    from hotloop.closedloop.evaluator import run_episode
    from hotloop.closedloop.latency import parse_latency
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    class Counting:
        spec = None

        def __init__(self) -> None:
            self.calls = 0

        def reset(self) -> None:
            self.calls = 0

        def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
            self.calls += 1
            return {"actions": np.tile(env.hold_action(), (4, 1))}

    observes = 0
    plain_observe = env.observe

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal observes
        observes += 1
        return plain_observe(*args, **kwargs)

    policy = Counting()
    assert not isinstance(adapt(policy, env.task_spec), AdaptedPolicy)  # no spec: as it is, no hook
    env.observe = counted
    try:
        env.reset(seed=0)
        by_reset, observes = observes, 0  # what the task's own reset observes
        run_episode(
            env, policy, lambda h: make_strategy("chunk", StrategyConfig(h)), parse_latency("fixed:0"), 0
        )
    finally:
        del env.observe
    assert policy.calls >= 2 and observes == policy.calls + by_reset


def test_the_robot_runner_queues_observations_in_order_with_inferences() -> None:
    """WallClockRunner's threaded engine: observe runs on the inference thread, after every inference
    started before it, so each inference sees exactly the periods observed up to its start."""
    from hotloop.realtime.runner import WallClockRunner
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    events: list[tuple[str, float]] = []
    lock = threading.Lock()

    class Robot:
        def __init__(self) -> None:
            self.n = 0.0

        def observe(self) -> dict[str, Any]:
            self.n += 1
            return {"state": np.array([self.n, 0, 0, 0], dtype=np.float32)}

        def hold_action(self) -> np.ndarray:
            return np.zeros(4)

        def command(self, action: np.ndarray) -> None:
            pass

    class Slow:
        def reset(self) -> None:
            pass

        def observe(self, obs: dict[str, Any]) -> None:
            with lock:
                events.append(("observe", float(obs["state"][0])))

        def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
            with lock:
                events.append(("infer", float(obs["state"][0])))
            time.sleep(0.05)  # half a period: the loop observes on meanwhile
            return {"actions": np.zeros((4, 4))}

    run = WallClockRunner(Slow(), Robot(), lambda h: make_strategy("async", StrategyConfig(h)), 10.0)
    run.run(0.8)
    time.sleep(0.2)
    infers = [i for i, (kind, _) in enumerate(events) if kind == "infer"]
    assert len(infers) >= 2
    for i in infers:
        before = [v for kind, v in events[:i] if kind == "observe"]
        assert before and before[-1] == events[i][1]  # the inference's own frame was observed first
    values = [v for kind, v in events if kind == "observe"]
    assert values == sorted(values) and len(values) >= 6  # every period, in order


@pytest.mark.parametrize("strategy", ["sync", "async"])
def test_eval_runs_a_checkpoint_under_sync_and_async(tiny_ckpt: Path, tmp_path: Path, strategy: str) -> None:
    import json

    js = tmp_path / "e.json"
    res = runner.invoke(
        app,
        ["eval", str(tiny_ckpt), "--task", "reach", "--episodes", "1", "--workers", "0", "--strategy", strategy,
         "--latency", "fixed:50", "--json", str(js)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    report = json.loads(js.read_text())
    text = json.dumps(report)
    assert '"errors": 0' in text and "inferences" in text
