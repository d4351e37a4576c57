"""The control loop that drives a `ChunkScheduler`, and the inference engines it runs.

`run_loop` is the one loop: the closed-loop evaluator runs it on the simulator's clock, a robot runs it
on the monotonic wall clock (`WallClockRunner`). Per decision it (1) installs a finished inference,
(2) checks the in-flight inference's deadline (a miss switches to the fallback at that tick), (3) starts
an inference when the scheduler wants one (with RTC guidance inputs), and (4) commands the next
segment and lets time pass until its end, until the inference's deadline, or, when the robot is
waiting for it, until the inference completes.

A policy with the optional `observe(obs)` hook (`hotloop.policy`: one that keeps an observation history)
is shown the observation of every control decision (each commanded segment starts a control period),
before an inference starts on it; for any other policy the loop observes only when it infers, as before.

Two parts differ between sim and robot, behind two small protocols:
- `Engine`: runs one inference at a time. `SimulatedEngine` calls the policy at once and makes the
  result available after a latency the caller decides (the evaluator's latency models);
  `ThreadedEngine` runs the policy in a worker thread against the wall clock.
- `Plant`: what is controlled. The simulator steps physics to a tick; a robot is commanded and the loop
  sleeps on the clock (`RobotPlant`), counting overruns.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hotloop.realtime.clock import Clock, MonotonicClock
from hotloop.realtime.scheduler import ChunkScheduler, Completion, SchedulerConfig, Segment
from hotloop.realtime.strategies import Strategy


class Engine(Protocol):
    @property
    def busy(self) -> bool: ...

    def start(self, obs: dict[str, Any], now: int) -> None: ...

    def poll(self, now: int) -> Completion | None:
        """The finished inference, if it finished by `now` (then the engine is free again)."""
        ...

    def wait(self, until: int, wake_on_result: bool) -> int:
        """Let the in-flight inference run until `until`, or until it completes when `wake_on_result`;
        return the tick to let the plant run to."""
        ...

    # Optional (`observes` / `observe`): the engines below forward the policy's `observe` hook, in order
    # with its inferences. An engine without them is never shown the periods' observations.


class Plant(Protocol):
    def observe(self) -> dict[str, Any]: ...

    def hold_action(self) -> np.ndarray:
        """The last commanded action (what the robot keeps doing when told nothing new)."""
        ...

    def command(self, action: np.ndarray) -> None: ...

    def run_until(self, tick: int) -> bool:
        """Let time pass to `tick` under the current command; True when the episode is over."""
        ...


def run_loop(
    scheduler: ChunkScheduler,
    clock: Clock,
    engine: Engine,
    plant: Plant,
    end_tick: int,
    on_segment: Callable[[Segment, int, int], None] | None = None,
) -> None:
    """Drive `scheduler` until `end_tick` or until the plant says the episode is over.
    `on_segment(segment, start, end)` sees every commanded segment with the ticks it actually ran."""
    observe = getattr(engine, "observe", None) if getattr(engine, "observes", False) else None
    observing = observe is not None
    frame: dict[str, Any] | None = None  # this decision's observation, for a policy that observes
    frame_tick: int | None = None
    while True:
        now = clock.now()
        if now >= end_tick:
            return
        done = engine.poll(now)
        if done is not None:
            scheduler.completed(done, plant.hold_action(), now)
            continue  # the new chunk may already want the next inference (async, short chunks)
        if observing and frame_tick != now:
            # One observation per control decision, shown before any inference of it: the inference
            # (if one starts now) runs on the same frame.
            frame, frame_tick = plant.observe(), now
            assert observe is not None
            observe(dict(frame), now)
        if engine.busy:
            scheduler.check_deadline(now)
        elif scheduler.wants_inference(now):
            obs = dict(frame) if observing and frame is not None else plant.observe()
            guidance = scheduler.guidance(now)
            obs.update(guidance)
            scheduler.started(now, guided=bool(guidance))
            engine.start(obs, now)
            continue  # a zero-latency result is ready at once
        seg = scheduler.next_segment(now, plant.hold_action(), plant.observe)
        end = end_tick if seg.end is None else min(seg.end, end_tick)
        plant.command(seg.action)
        t, over = now, False
        while True:
            wake = end
            if engine.busy:
                deadline = scheduler.deadline
                if deadline is not None and deadline < wake:
                    wake = deadline  # a miss must switch within this control period
                wake = engine.wait(wake, wake_on_result=True)
            over = plant.run_until(wake)
            t = clock.now()
            if over or t >= end:
                break
            done = engine.poll(t)
            if done is None:
                break  # woken at the deadline: the top of the loop records the miss and switches
            scheduler.completed(done, plant.hold_action(), t)
            if seg.wake_on_result or scheduler.watchdog.in_fallback:
                break  # the robot was waiting for this chunk, or it failed: decide again now
            # A good chunk arrived while an action runs: that action keeps its period.
        if on_segment is not None:
            on_segment(seg, now, t)
        if over:
            return


class PolicyEngine:
    """What both engines answer from their policy alike: whether it has a history hook (`observes`)."""

    policy: Any

    @property
    def observes(self) -> bool:
        from hotloop.policy import observes

        return observes(self.policy)


@dataclass
class SimulatedEngine(PolicyEngine):
    """Calls the policy at once and releases the result `latency_ms(measured_ms)` later in clock ticks
    (rounded up to a whole tick: a chunk can only take effect at a tick). `latencies_ms` holds each
    latency asked for, `simulated_ms` the one that ran (whole ticks); they differ where the tick is
    coarse (a gymnasium env's step: `fixed:50` runs as 100 ms at 10 Hz). `scale_by_work`: the latency asked
    for stands for a full inference, and an answer that reports doing a fraction of one (a `--strategy
    draft` call, `hotloop.realtime.draft.work_of`) is released after that fraction of it; `draft_calls`
    holds each inference's draft statistics (None for any other answer). `catch_errors`: an exception is
    a fault the watchdog handles (a robot's choice) instead of propagating (the evaluator's: it is an
    error, not a policy failure). `check_output(output, tick)`: called on every output before it is
    released; what it raises propagates (the evaluator stops the run on non-finite actions there)."""

    policy: Any
    tick_s: float
    latency_ms: Callable[[float], float] = lambda measured: measured
    catch_errors: bool = False
    check_output: Callable[[Any, int], None] | None = None
    scale_by_work: bool = False
    latencies_ms: list[float] = field(default_factory=list)
    measured_ms: list[float] = field(default_factory=list)
    simulated_ms: list[float] = field(default_factory=list)
    inference_ticks: list[tuple[int, int]] = field(default_factory=list)
    draft_calls: list[dict[str, Any] | None] = field(default_factory=list)
    _pending: Completion | None = None

    @property
    def busy(self) -> bool:
        return self._pending is not None

    def observe(self, obs: dict[str, Any], now: int) -> None:
        """The policy's history hook, at once (its inferences run at once too: the order is the loop's)."""
        self.policy.observe(obs)

    def start(self, obs: dict[str, Any], now: int) -> None:
        t0 = time.perf_counter()
        output: dict[str, Any] | None = None
        error: str | None = None
        try:
            output = self.policy.infer(obs)
        except Exception as e:
            if not self.catch_errors:
                raise
            error = f"{type(e).__name__}: {e}"
        if output is not None and self.check_output is not None:
            self.check_output(output, now)
        real_ms = (time.perf_counter() - t0) * 1e3
        lat_ms = self.latency_ms(real_ms)
        from hotloop.realtime.draft import outcome_of, work_of

        work = work_of(output)
        if work is not None and self.scale_by_work:
            lat_ms *= work
        self.draft_calls.append(outcome_of(output))
        self.measured_ms.append(real_ms)
        self.latencies_ms.append(lat_ms)
        ready = now + math.ceil(lat_ms / (self.tick_s * 1e3) - 1e-9)
        self.simulated_ms.append((ready - now) * self.tick_s * 1e3)
        self.inference_ticks.append((now, ready))
        self._pending = Completion(now, ready, output, error)

    def poll(self, now: int) -> Completion | None:
        if self._pending is not None and self._pending.ready_tick <= now:
            done, self._pending = self._pending, None
            return done
        return None

    def wait(self, until: int, wake_on_result: bool) -> int:
        if self._pending is not None and wake_on_result:
            return min(until, self._pending.ready_tick)
        return until


class ThreadedEngine(PolicyEngine):
    """Runs `policy.infer` in one worker thread (one accelerator: one inference at a time) against a
    wall clock. Exceptions are faults for the watchdog: a robot never stops for a raising policy."""

    def __init__(self, policy: Any, clock: Clock) -> None:
        self.policy = policy
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hotloop-infer")
        self._future: Future[tuple[dict[str, Any] | None, str | None, int]] | None = None
        self._obs_tick = 0
        self._observe_error: str | None = None
        self.inference_ticks: list[tuple[int, int]] = []

    @property
    def busy(self) -> bool:
        return self._future is not None

    def observe(self, obs: dict[str, Any], now: int) -> None:
        """The policy's history hook, queued on the inference thread: it runs after every inference started
        before it and before every later one, so an inference sees exactly the periods observed up to its
        start, and the control loop never waits for it. A failing hook is the next inference's fault."""
        self._pool.submit(self._observe, obs)

    def _observe(self, obs: dict[str, Any]) -> None:
        try:
            self.policy.observe(obs)
        except Exception as e:  # noqa: BLE001 - reported by the next inference, never raised on the robot
            self._observe_error = f"{type(e).__name__}: {e}"

    def _run(self, obs: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None, int]:
        if self._observe_error is not None:
            error, self._observe_error = self._observe_error, None
            return None, f"observe failed: {error}", self.clock.now()
        try:
            out = self.policy.infer(obs)
            return out, None, self.clock.now()
        except Exception as e:  # noqa: BLE001 - the watchdog handles it
            return None, f"{type(e).__name__}: {e}", self.clock.now()

    def start(self, obs: dict[str, Any], now: int) -> None:
        self._obs_tick = now
        self._future = self._pool.submit(self._run, obs)

    def poll(self, now: int) -> Completion | None:
        if self._future is None or not self._future.done():
            return None
        out, error, ready = self._future.result()
        self._future = None
        self.inference_ticks.append((self._obs_tick, ready))
        return Completion(self._obs_tick, min(ready, now), out, error)

    def wait(self, until: int, wake_on_result: bool) -> int:
        if self._future is not None and wake_on_result:
            seconds = getattr(self.clock, "seconds_until", lambda t: 0.0)(until)
            try:
                self._future.exception(timeout=seconds)
            except TimeoutError:
                return until
            return min(until, self.clock.now())
        return until

    def close(self) -> None:
        # A stalled inference cannot be killed from Python: leave its thread behind, never wait on it.
        self._pool.shutdown(wait=False, cancel_futures=True)


class Robot(Protocol):
    """What a robot exposes to the runner (a thin adapter over its driver)."""

    def observe(self) -> dict[str, Any]: ...

    def command(self, action: np.ndarray) -> None: ...

    def hold_action(self) -> np.ndarray: ...


@dataclass
class RobotPlant:
    """A robot behind the `Plant` protocol: time passes by sleeping on the clock's deadlines."""

    robot: Any
    clock: Clock
    commands: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (tick, action) as sent

    def observe(self) -> dict[str, Any]:
        return dict(self.robot.observe())

    def hold_action(self) -> np.ndarray:
        return np.asarray(self.robot.hold_action(), dtype=np.float64)

    def command(self, action: np.ndarray) -> None:
        self.commands.append((self.clock.now(), np.asarray(action, dtype=np.float64).copy()))
        self.robot.command(action)

    def run_until(self, tick: int) -> bool:
        self.clock.sleep_until(tick)
        return False


@dataclass
class RunReport:
    ticks: int
    chunks: int
    counters: dict[str, int]  # the watchdog's, plus overruns and stale actions dropped
    events: list[Any]
    jumps: list[float]
    commands: list[tuple[int, np.ndarray]]


class WallClockRunner:
    """Run a policy on a robot in real time: the scheduler on monotonic deadlines, inference in a
    worker thread (or any `Engine`), every overrun counted.

    `make_strategy(horizon)` builds the strategy when the first chunk shows the horizon;
    `control_hz` the robot's command rate; `tick_s` the clock's resolution."""

    def __init__(
        self,
        policy: Any,
        robot: Any,
        make_strategy: Callable[[int], Strategy],
        control_hz: float,
        *,
        config: SchedulerConfig | None = None,
        clock: Clock | None = None,
        engine: Engine | None = None,
        fallback_policy: Any = None,
        action_dim: int | None = None,
        metrics: Any = None,
    ) -> None:
        """`metrics`: a `hotloop.measure.live_metrics.LiveMetrics` that mirrors the watchdog's counters
        (misses, faults, switches, returns, time in fallback) at every control period while it runs;
        expose it with `metrics.serve_http(port)`."""
        from hotloop.errors import ConfigError

        self.clock = clock if clock is not None else MonotonicClock()
        ticks = 1.0 / (control_hz * self.clock.tick_s)
        if control_hz <= 0 or abs(ticks - round(ticks)) > 1e-6:
            raise ConfigError(
                f"--control-hz {control_hz:g}: the control period must be a whole number of clock ticks "
                f"({self.clock.tick_s * 1e3:g} ms)"
            )
        self.period = round(ticks)
        self.engine: Engine = engine if engine is not None else ThreadedEngine(policy, self.clock)
        self.plant = RobotPlant(robot, self.clock)
        self.scheduler = ChunkScheduler(
            make_strategy,
            self.period,
            self.clock.tick_s,
            action_dim=action_dim,
            config=config,
            fallback_policy=fallback_policy,
        )
        self.metrics = metrics

    def run(
        self, duration_s: float, on_segment: Callable[[Segment, int, int], None] | None = None
    ) -> RunReport:
        start = self.clock.now()
        end = start + round(duration_s / self.clock.tick_s)
        watch = on_segment
        if self.metrics is not None:
            metrics, watchdog, kind = (
                self.metrics,
                self.scheduler.watchdog,
                self.scheduler.config.watchdog.fallback,
            )

            def watch(seg: Segment, a: int, b: int) -> None:
                # Counters only (dict arithmetic, microseconds): the period's time is the robot's.
                metrics.observe_watchdog_totals(watchdog.counters(b), kind, tick_s=self.clock.tick_s)
                if on_segment is not None:
                    on_segment(seg, a, b)

        try:
            run_loop(self.scheduler, self.clock, self.engine, self.plant, end, watch)
        finally:
            close = getattr(self.engine, "close", None)
            if close is not None:
                close()
        now = self.clock.now()
        counters = dict(self.scheduler.watchdog.counters(now))
        if self.metrics is not None:
            self.metrics.observe_watchdog_totals(
                counters, self.scheduler.config.watchdog.fallback, tick_s=self.clock.tick_s
            )
        overruns = getattr(self.clock, "overruns", None)
        counters["overruns"] = overruns.count if overruns is not None else 0
        counters["worst_overrun_ticks"] = overruns.worst_ticks if overruns is not None else 0
        counters["stale_dropped"] = self.scheduler.stale_dropped
        return RunReport(
            ticks=now - start,
            chunks=self.scheduler.chunks,
            counters=counters,
            events=list(self.scheduler.watchdog.events),
            jumps=list(self.scheduler.jumps),
            commands=list(self.plant.commands),
        )
