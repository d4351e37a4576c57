"""The server's deadline watchdog: `hotloop.realtime`'s `DeadlineWatchdog` on a 1 ms wall-clock tick.

A server cannot hold, continue or stop a robot (the robot's own runner does that); what it can do on a
missed deadline is answer from a smaller engine. With `--deadline-ms` every inference of the main policy
gets that deadline, measured from the moment the model starts on it (not from its arrival: the queue is
the newest-wins slot's business). A miss or a fault (the policy raised or returned non-finite actions,
`hotloop.serve.guard`; counted with or without --deadline-ms) is counted and switches the server to its
fallback:

- with `--fallback engine:TARGET` the request is answered by the smaller engine at once; while the main
  model is still busy with the stale inference, later requests go to the engine too;
- without one the late reply still goes out (a fault is an error reply, as without a watchdog); the
  robot's own watchdog decides what to do meanwhile.

The server returns to normal at the next in-time chunk of the main model. The counters are the robot
runner's (`misses`, `faults`, `switches`, `returns`, `fallback_ticks` in milliseconds here), exported on
`/metrics`; events are kept for the last `MAX_EVENTS` only (a server runs for weeks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from hotloop.errors import ConfigError
from hotloop.measure.live_metrics import LiveMetrics
from hotloop.realtime.watchdog import DeadlineWatchdog, WatchdogConfig

TICK_S = 0.001  # the watchdog's tick on the server: one millisecond of wall time
MAX_EVENTS = 1000


def check_limit_ms(flag: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{flag} must be a positive number of milliseconds (got {value})")


@dataclass
class ServerWatchdog:
    """The deadline bookkeeping of one server (used on its event loop thread only)."""

    deadline_ms: float | None
    fallback_kind: str  # "engine" with a fallback engine, "hold" without (the robot holds meanwhile)
    metrics: LiveMetrics
    clock: Callable[[], float] = time.perf_counter

    def __post_init__(self) -> None:
        check_limit_ms("--deadline-ms", self.deadline_ms)
        self._t0 = self.clock()
        self.watchdog = DeadlineWatchdog(WatchdogConfig(self.fallback_kind, self.deadline_ms), 1, TICK_S)

    def _now(self) -> int:
        return math.floor((self.clock() - self._t0) / TICK_S)

    @property
    def in_fallback(self) -> bool:
        return self.watchdog.in_fallback

    def started(self) -> None:
        now = self._now()
        self.watchdog.started(now, now if self.deadline_ms is not None else None)

    def seconds_left(self) -> float | None:
        """Until the deadline of the inference in flight (None: it has none)."""
        deadline = self.watchdog.deadline
        if deadline is None:
            return None
        return max(0.0, self._t0 + deadline * TICK_S - self.clock())

    def missed(self) -> None:
        """The wait for the deadline ran out: record the miss (at the deadline's tick at the earliest)."""
        deadline = self.watchdog.deadline
        if deadline is not None:
            self.watchdog.check(max(self._now(), deadline))
        self.export()

    def fault(self, detail: str) -> None:
        self.watchdog.fault(self._now(), detail)
        self.export()

    def fresh(self) -> None:
        self.watchdog.fresh_chunk(self._now())
        self.export()

    def counters(self) -> dict[str, int]:
        return self.watchdog.counters(self._now())

    def export(self) -> None:
        """Mirror the counters into the metrics (also called at every scrape: fallback time grows)."""
        del self.watchdog.events[:-MAX_EVENTS]
        self.metrics.observe_watchdog_totals(self.counters(), self.fallback_kind, tick_s=TICK_S)
