"""One scheduler, two clocks: the simulator's physics clock and a (fake) wall clock on a robot command
exactly the same action at every tick."""

import itertools

import numpy as np
import pytest
from rt_fakes import FakeRobot, ScriptedPolicy

from hotloop.closedloop.evaluator import run_episode
from hotloop.closedloop.latency import parse_latency
from hotloop.realtime.clock import FakeClock
from hotloop.realtime.runner import SimulatedEngine, WallClockRunner
from hotloop.realtime.scheduler import Segment
from hotloop.realtime.strategies import StrategyConfig, make_strategy
from hotloop.sim.tasks import make_task


@pytest.fixture(scope="module")
def env():
    return make_task("reach")


def _sim_trace(env, name, ms, seed):
    rec = run_episode(
        env,
        ScriptedPolicy(),
        lambda h: make_strategy(name, StrategyConfig(h)),
        parse_latency(f"fixed:{ms}"),
        seed,
        trace=True,
    )
    return rec["actions_by_tick"], rec


def _wall_trace(env, name, ms, seed, ticks):
    env.reset(seed=seed)
    robot = FakeRobot(env.hold_action())
    clock = FakeClock(tick_s=env.config.physics_dt)
    policy = ScriptedPolicy()
    engine = SimulatedEngine(policy, clock.tick_s, lambda measured: float(ms))
    runner = WallClockRunner(
        policy,
        robot,
        lambda h: make_strategy(name, StrategyConfig(h)),
        env.config.control_hz,
        clock=clock,
        engine=engine,
    )
    by_tick: list[np.ndarray] = []

    def on_segment(seg: Segment, start: int, end: int) -> None:
        by_tick.extend([np.asarray(seg.action, dtype=np.float64)] * (end - start))

    report = runner.run(ticks * clock.tick_s, on_segment)
    return np.asarray(by_tick), report, policy


@pytest.mark.parametrize("name", ["sync", "chunk", "async", "rtc", "rtc-soft"])
@pytest.mark.parametrize("ms", [0, 30, 120, 250])
def test_sim_and_wall_clock_command_the_same_actions(env, name, ms):
    sim, rec = _sim_trace(env, name, ms, seed=4)
    wall, report, policy = _wall_trace(env, name, ms, seed=4, ticks=len(sim))
    assert len(sim) > 500 and wall.shape == sim.shape
    np.testing.assert_array_equal(wall, sim)
    assert report.counters["overruns"] == 0
    assert report.counters["inferences"] == rec["inferences"]
    if name in ("rtc", "rtc-soft") and ms > 0:
        # From the second inference on, the policy was sent the unexecuted tail of the running chunk.
        assert all(g is not None for g in policy.guidance[1:])


@pytest.mark.parametrize("ms", [30, 120, 250])
def test_rtc_frozen_prefix_is_what_the_robot_executes_meanwhile(env, ms):
    """Row i of the tail sent to the policy is the action executed in the period starting i periods after
    the observation: the first d rows (d = the delay in periods) are exactly what runs while it thinks."""
    policy = ScriptedPolicy()
    rec = run_episode(
        env,
        policy,
        lambda h: make_strategy("rtc", StrategyConfig(h)),
        parse_latency(f"fixed:{ms}"),
        5,
        trace=True,
    )
    by_tick, period = rec["actions_by_tick"], env.config.ticks_per_control
    checked = 0
    for (obs_tick, ready_tick), sent in zip(rec["inference_ticks"], policy.guidance, strict=True):
        if sent is None:
            continue
        d = -(-(ready_tick - obs_tick) // period)
        assert rec["watchdog"]["misses"] == 0 and 0 < d <= len(sent)
        for i in range(d):
            t = obs_tick + i * period
            if t < len(by_tick):
                np.testing.assert_array_equal(by_tick[t], sent[i])
                checked += 1
    assert checked >= 5


def test_blending_reaches_the_commands(env):
    from hotloop.realtime.blending import BlendConfig
    from hotloop.realtime.scheduler import SchedulerConfig

    policy = ScriptedPolicy()
    rec = run_episode(
        env,
        policy,
        lambda h: make_strategy("async", StrategyConfig(h)),
        parse_latency("fixed:0"),
        4,
        trace=True,
        config=SchedulerConfig(blend=BlendConfig("average")),
    )
    # Chunk 1 is observed at tick 250 (5 actions remain) and starts there: its action 0 is averaged with
    # chunk 0's action 5, planned for the same period.
    np.testing.assert_allclose(
        rec["actions_by_tick"][250], 0.5 * policy.chunk(1)[0] + 0.5 * policy.chunk(0)[5]
    )


@pytest.mark.parametrize("ms", [0, 30, 120, 250])
def test_rtc_soft_replans_often_by_default(env, ms):
    """rtc-soft's default trigger (k = H - 2) starts a new plan every max(d, 2) periods (d = the delay in
    periods), observed at the first control boundary after the last one is in when d >= 2. Async keeps
    H/2."""
    period = env.config.ticks_per_control
    _, soft = _sim_trace(env, "rtc-soft", ms, seed=6)
    ticks = soft["inference_ticks"]
    # Every chunk runs before the next replaces it (a chunk installed mid-period once drew the next
    # inference at once, and the robot held forever under a stream of chunks that never started).
    ran = {chunk for _, _, chunk, index in soft["trace"] if index >= 0}
    assert ran == set(range(len(ticks))) - {len(ticks) - 1} or ran == set(range(len(ticks)))
    assert len(ticks) > 10
    d = -(-(ticks[0][1] - ticks[0][0]) // period)
    gaps = {b[0] - a[0] for a, b in itertools.pairwise(ticks)}
    assert gaps == {max(d, 2) * period}
    if d >= 2:
        # Observed at the first control boundary at or after the last chunk was in (no idle period).
        assert all(b[0] == -(-a[1] // period) * period for a, b in itertools.pairwise(ticks))
    _, plain = _sim_trace(env, "async", ms, seed=6)
    assert {b[0] - a[0] for a, b in itertools.pairwise(plain["inference_ticks"])} == {
        (10 // 2) * period  # ScriptedPolicy's H = 10: k = 5 remaining, 5 executed per chunk
    }
    # An explicit --trigger-remaining still wins.
    s = make_strategy("rtc-soft", StrategyConfig(10, trigger_remaining=4))
    assert s.describe()["trigger_remaining"] == 4
    assert make_strategy("rtc-soft", StrategyConfig(10)).describe()["trigger_remaining"] == 8
    assert make_strategy("rtc", StrategyConfig(10)).describe()["trigger_remaining"] == 5
