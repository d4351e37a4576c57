"""Clocks the scheduler runs against: integer ticks of a known length.

The scheduler only ever sees ticks. In the simulator a tick is a physics step and time passes when the
physics is stepped (`SimClock`); on a robot a tick is a slice of `time.monotonic_ns()` and time passes
by itself (`MonotonicClock`: `sleep_until` sleeps to an absolute deadline, so lateness never
accumulates, and counts the deadlines it was already past: overruns). `FakeClock` is a wall clock
whose time moves only when it is slept on, for tests that must be exact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol


class Clock(Protocol):
    @property
    def tick_s(self) -> float:
        """Seconds per tick."""
        ...

    def now(self) -> int: ...

    def sleep_until(self, tick: int) -> None:
        """Return at `tick` (at once if it is past)."""
        ...


@dataclass
class Overruns:
    """Deadlines a wall-clock loop reached late: how many, and by how much at worst (ticks)."""

    count: int = 0
    worst_ticks: int = 0

    def record(self, late_ticks: int) -> None:
        if late_ticks > 0:
            self.count += 1
            self.worst_ticks = max(self.worst_ticks, late_ticks)


class SimClock:
    """The simulator's physics clock: `now` is the env's tick; time passes only when physics steps."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.tick_s = float(env.config.physics_dt)

    def now(self) -> int:
        return int(self.env.tick)

    def sleep_until(self, tick: int) -> None:
        raise RuntimeError("the simulator's clock advances by stepping physics, not by sleeping")


@dataclass
class MonotonicClock:
    """Wall time from `time.monotonic_ns`, in ticks of `tick_s` counted from construction."""

    tick_s: float = 0.001
    overruns: Overruns = field(default_factory=Overruns)
    late_tolerance_ticks: int = 1  # waking within a tick of the deadline is on time
    _t0: int = field(default_factory=time.monotonic_ns, repr=False)

    def now(self) -> int:
        return int((time.monotonic_ns() - self._t0) // round(self.tick_s * 1e9))

    def seconds_until(self, tick: int) -> float:
        return max(0.0, (self._t0 + tick * round(self.tick_s * 1e9) - time.monotonic_ns()) / 1e9)

    def sleep_until(self, tick: int) -> None:
        late = self.now() - tick
        if late > self.late_tolerance_ticks:
            self.overruns.record(late)
            return
        while (wait := self.seconds_until(tick)) > 0:
            time.sleep(wait)


@dataclass
class FakeClock:
    """A wall clock for tests: time stands still until someone sleeps on it (or calls `advance`)."""

    tick_s: float = 0.002
    tick: int = 0
    overruns: Overruns = field(default_factory=Overruns)

    def now(self) -> int:
        return self.tick

    def seconds_until(self, tick: int) -> float:
        return max(0.0, (tick - self.tick) * self.tick_s)

    def sleep_until(self, tick: int) -> None:
        if tick < self.tick:
            self.overruns.record(self.tick - tick)
        self.tick = max(self.tick, tick)

    def advance(self, ticks: int) -> None:
        self.tick += ticks
