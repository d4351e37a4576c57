"""Fault injection: an engine that stalls, raises or returns NaN. The runner switches to the fallback in
the control period of the miss (at its very tick), and returns when a fresh chunk arrives.

The clock is a fake wall clock (2 ms ticks, 10 Hz control: 50 ticks a period); inference normally takes
30 ms. Async, horizon 10, trigger at 5 remaining: inference 2 (the faulty one) starts at tick 500 with
the deadline 750 (the end of the running chunk). A stall lasts 800 ms (ready at 900)."""

import numpy as np
import pytest
from rt_fakes import FakeRobot, FaultyPolicy, SmallEnginePolicy

from hotloop.errors import ConfigError
from hotloop.realtime.clock import FakeClock, MonotonicClock
from hotloop.realtime.runner import SimulatedEngine, WallClockRunner
from hotloop.realtime.scheduler import SchedulerConfig, Segment
from hotloop.realtime.strategies import StrategyConfig, make_strategy
from hotloop.realtime.watchdog import WatchdogConfig, parse_fallback

PERIOD = 50
HOME = np.array([0.1, 0.0, 0.2, 0.0])


def _run(fault, fallback, strategy="async", deadline_ms=None, max_decel=2.0, seconds=2.0):
    clock = FakeClock(tick_s=0.002)
    policy = FaultyPolicy(fault, fault_call=2)
    calls = []

    def latency(measured_ms: float) -> float:
        calls.append(measured_ms)
        return 800.0 if (fault == "stall" and len(calls) == 3) else 30.0

    engine = SimulatedEngine(policy, clock.tick_s, latency, catch_errors=True)
    config = SchedulerConfig(watchdog=WatchdogConfig(fallback, deadline_ms=deadline_ms, max_decel=max_decel))
    runner = WallClockRunner(
        policy,
        FakeRobot(HOME),
        lambda h: make_strategy(strategy, StrategyConfig(h)),
        10.0,
        config=config,
        clock=clock,
        engine=engine,
        fallback_policy=SmallEnginePolicy() if fallback == "engine" else None,
    )
    segments: list[tuple[Segment, int, int]] = []
    report = runner.run(seconds, lambda seg, a, b: segments.append((seg, a, b)))
    by_tick = np.concatenate([np.repeat(np.asarray(s.action)[None], b - a, axis=0) for s, a, b in segments])
    return report, by_tick, segments


def _events(report):
    return [(e.kind, e.tick) for e in report.events]


@pytest.mark.parametrize("fault", ["stall", "raise", "nan"])
@pytest.mark.parametrize("fallback", ["hold", "continue", "stop", "engine"])
def test_switch_in_the_period_of_the_miss_and_return(fault, fallback):
    report, by_tick, _ = _run(fault, fallback)
    kinds = [k for k, _ in _events(report)]
    first = "miss" if fault == "stall" else "fault"
    assert kinds[:3] == [first, "switch", "return"], _events(report)
    (_, t_miss), (_, t_switch), (_, t_return) = _events(report)[:3]
    assert t_switch == t_miss  # same tick, so the same control period
    assert report.events[0].due == t_miss  # and seen the tick it was due (deadline / failed result)
    if fault == "stall":
        assert t_miss == 750 and t_return == 900  # the deadline; the stalled chunk finally arrives
    else:
        assert t_miss == 515  # the failed result was known at 500 + 30 ms
    c = report.counters
    assert c["switches"] == c["returns"] == 1 and c["fallback_ticks"] == t_return - t_switch
    assert c["misses" if fault == "stall" else "faults"] == 1
    # Before the switch the robot ran the chunk; from the switch tick on, the fallback's commands.
    during = by_tick[t_switch:t_return]
    before = by_tick[t_switch - 1]
    if fallback == "hold":
        assert np.all(during == before)
    elif fallback == "engine":
        assert np.all(during[:, 3] == 0.5)  # the small engine's grip
        assert by_tick[t_switch - 1, 3] != 0.5
    elif fallback == "stop":
        assert np.all(during[:, :3] == during[0, :3]) or np.all(np.diff(during[:, 2]) >= 0)


def test_continue_runs_the_rest_of_the_chunk_after_a_miss():
    # Deadline 100 ms after the start: inference 2 (start 500) misses at 550 while chunk 1 still has
    # actions 6..9 planned for 550..750; `continue` executes them, then holds.
    report, by_tick, _ = _run("stall", "continue", deadline_ms=100)
    assert _events(report)[:2] == [("miss", 550), ("switch", 550)]
    grips = [round(by_tick[t, 3] * 1e4) for t in (550, 600, 650, 700)]
    assert grips == [106, 107, 108, 109]  # chunk 1, actions 6-9
    assert np.all(by_tick[750:900] == by_tick[749])  # nothing left: hold until the fresh chunk


def test_continue_resumes_a_sync_chunk():
    # sync holds while inferring; on a miss `continue` runs the rest of the last chunk meanwhile.
    report, by_tick, _ = _run("stall", "continue", strategy="sync")
    (kind, t), _ = _events(report)[:2]
    assert kind == "miss"
    assert round(by_tick[t, 3] * 1e4) % 100 == 1  # the last chunk's action 1 follows its action 0


def test_stop_decelerates_within_the_limit():
    # Chunk actions climb 1 mm per period in z (10 mm/s); max_decel 0.05 m/s^2 takes off 5 mm/s per period.
    report, by_tick, segments = _run("stall", "stop", max_decel=0.05)
    t = _events(report)[1][1]
    z = [by_tick[t + k * PERIOD, 2] for k in range(3)]  # 750, 800, 850; the stalled chunk comes at 900
    steps = np.diff([by_tick[t - 1, 2], *z])
    np.testing.assert_allclose(steps, [0.0005, 0.0, 0.0], atol=1e-12)
    speeds = np.abs(np.diff([by_tick[t - PERIOD - 1, 2], by_tick[t - 1, 2], *z])) / 0.1
    assert np.all(np.abs(np.diff(speeds)) <= 0.05 * 0.1 + 1e-12)


def test_engine_fallback_needs_an_engine():
    with pytest.raises(ConfigError, match="fallback engine"):
        WallClockRunner(
            FaultyPolicy("stall"),
            FakeRobot(HOME),
            lambda h: make_strategy("async", StrategyConfig(h)),
            10.0,
            config=SchedulerConfig(watchdog=WatchdogConfig("engine")),
            clock=FakeClock(),
        )
    with pytest.raises(ConfigError, match="--fallback"):
        WatchdogConfig("brake")


def test_threaded_engine_on_the_wall_clock_switches_and_returns():
    """The real thing: a worker thread that blocks, a monotonic clock. No timing is asserted (the
    machine may be loaded); the switch is at the tick the miss was seen, by construction."""
    clock = MonotonicClock(tick_s=0.001)
    policy = FaultyPolicy("block", fault_call=2)
    runner = WallClockRunner(
        policy,
        FakeRobot(HOME),
        lambda h: make_strategy("async", StrategyConfig(h)),
        50.0,  # 20 ms periods; a chunk of 10 lasts 200 ms
        clock=clock,
    )

    import threading

    threading.Timer(0.6, policy.release.set).start()
    report = runner.run(1.2)
    # A chunk that comes back too late to have a future action is "stale": the robot stays in fallback
    # until the next one (which one it is depends on how loaded the machine is).
    events = [e for e in report.events if e.kind != "stale"]
    assert [e.kind for e in events[:3]] == ["miss", "switch", "return"], report.events
    assert events[0].tick == events[1].tick
    assert report.counters["overruns"] >= 0 and report.chunks >= 3


def test_fallback_spec_as_the_command_line_writes_it():
    assert parse_fallback("hold") == ("hold", None)
    assert parse_fallback("stop") == ("stop", None)
    assert parse_fallback("engine:expert:scripted") == ("engine", "expert:scripted")
    for bad in ("engine", "engine:", "brake", "hold:1", ""):
        with pytest.raises(ConfigError, match="--fallback"):
            parse_fallback(bad)
    with pytest.raises(ConfigError, match="--serve-fallback"):
        parse_fallback("engine", flag="--serve-fallback")


@pytest.mark.parametrize("fault", ["stall", "nan"])
def test_the_robot_runner_exports_its_watchdog_counters_live(fault):
    """`WallClockRunner(metrics=...)` mirrors the watchdog at every control period: mid-run, while the
    robot is in fallback, the switch is already on the exposition; at the end it equals the report."""
    from hotloop.measure.live_metrics import LiveMetrics

    metrics = LiveMetrics(read_machine=False)
    clock = FakeClock(tick_s=0.002)
    policy = FaultyPolicy(fault, fault_call=2)
    calls = []

    def latency(measured_ms: float) -> float:
        calls.append(measured_ms)
        return 800.0 if (fault == "stall" and len(calls) == 3) else 30.0

    runner = WallClockRunner(
        policy,
        FakeRobot(HOME),
        lambda h: make_strategy("async", StrategyConfig(h)),
        10.0,
        config=SchedulerConfig(watchdog=WatchdogConfig("hold")),
        clock=clock,
        engine=SimulatedEngine(policy, clock.tick_s, latency, catch_errors=True),
        metrics=metrics,
    )
    seen_in_fallback = []

    def on_segment(seg, a, b):
        if seg.source == "fallback":
            seen_in_fallback.append(metrics.value("hotloop_fallbacks_total", {"kind": "hold"}))

    report = runner.run(2.0, on_segment)
    assert seen_in_fallback and seen_in_fallback[0] == 1.0  # exported before the period ran out
    c = report.counters
    assert c["switches"] == 1 and c["returns"] == 1
    assert metrics.value("hotloop_deadline_misses_total") == c["misses"] == (fault == "stall")
    assert metrics.value("hotloop_engine_faults_total") == c["faults"] == (fault == "nan")
    assert metrics.value("hotloop_fallbacks_total", {"kind": "hold"}) == c["switches"]
    assert metrics.value("hotloop_fallback_returns_total") == c["returns"]
    assert metrics.value("hotloop_fallback_seconds_total") == pytest.approx(c["fallback_ticks"] * 0.002)
    assert b"hotloop_fallback_seconds_total" in metrics.exposition()[0]
