"""The deadline watchdog: every inference gets a deadline, and a miss switches the robot to a fallback.

Deadline of an inference started at tick s (unless `deadline_ms` fixes it at s + deadline_ms):
- strategies that keep executing while inferring (async, rtc): the end of the current chunk's last
  action, i.e. the moment the robot would run out of plan;
- strategies that hold while inferring (sync, chunk): one control period after s (the robot must get
  a fresh command every period).
The first inference of an episode has none: the robot starts at rest, holding, before any plan exists.

A miss (the deadline passes with the inference still running) or a fault (the inference raised or
returned non-finite actions) switches the runner to the fallback at that very tick, so the switch
always lands in the control period of the miss:
- `hold`: hold the last commanded action (what the robot does anyway when nothing comes);
- `continue`: keep executing the remaining actions of the last good chunk, then hold;
- `stop`: decelerate from the last commanded velocity to rest within `max_decel` (units/s² per action
  dimension), then hold;
- `engine`: run a second, smaller policy on the current observation and execute its chunk.
The runner returns to normal when a fresh chunk arrives. Every miss, fault, switch and return is an
`Event` with its tick; `counters()` is a plain dict for metrics.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from hotloop.errors import ConfigError

FALLBACKS = ("hold", "continue", "stop", "engine")


@dataclass(frozen=True)
class WatchdogConfig:
    fallback: str = "hold"
    deadline_ms: float | None = None  # None: derived from the chunk and the control rate (see above)
    max_decel: float = 2.0  # `stop`: per action dimension, units/s² (m/s² for position targets)

    def __post_init__(self) -> None:
        if self.fallback not in FALLBACKS:
            raise ConfigError(f"--fallback {self.fallback!r} is not known; use one of {', '.join(FALLBACKS)}")
        if self.deadline_ms is not None and not (self.deadline_ms > 0 and math.isfinite(self.deadline_ms)):
            raise ConfigError(
                f"--deadline-ms must be a positive number of milliseconds (got {self.deadline_ms})"
            )
        if not (self.max_decel > 0 and math.isfinite(self.max_decel)):
            raise ConfigError(f"--max-decel must be a positive number (got {self.max_decel})")


def parse_fallback(text: str, flag: str = "--fallback") -> tuple[str, str | None]:
    """A fallback as the command line writes it: `hold`, `continue`, `stop` or `engine:TARGET` (the smaller
    engine's target, e.g. `engine:expert:scripted`) -> (kind, target or None)."""
    kind, sep, target = text.strip().partition(":")
    if kind == "engine":
        if not target.strip():
            raise ConfigError(
                f"{flag} {text!r} names no engine; write engine:TARGET with the smaller engine's target, "
                "e.g. engine:expert:scripted (see `hotloop targets`)"
            )
        return kind, target.strip()
    if sep or kind not in FALLBACKS:
        raise ConfigError(f"{flag} {text!r} is not known; use hold, continue, stop or engine:TARGET")
    return kind, None


@dataclass(frozen=True)
class Event:
    """One thing the watchdog saw, at `tick` (when the runner saw it). kind: miss | fault | switch |
    return | stale | fallback_fault. `inference` counts from 0. `due`: for a miss its deadline, for a
    fault the tick the failed result was ready, so `tick - due` is how late the runner noticed."""

    kind: str
    tick: int
    inference: int
    detail: str = ""
    due: int | None = None


@dataclass
class WatchdogCounters:
    inferences: int = 0
    misses: int = 0
    faults: int = 0
    switches: int = 0
    returns: int = 0
    fallback_ticks: int = 0  # time spent in fallback, in ticks
    worst_lateness_ticks: int = 0  # how long after its deadline the latest chunk arrived, at worst


@dataclass
class DeadlineWatchdog:
    """Bookkeeping of deadlines and fallback mode; the scheduler asks it and tells it what happened."""

    config: WatchdogConfig
    period: int  # ticks per control period
    tick_s: float
    events: list[Event] = field(default_factory=list)
    stats: WatchdogCounters = field(default_factory=WatchdogCounters)
    deadline: int | None = None  # of the inference in flight; None when none or already missed
    in_fallback: bool = False
    _inference: int = -1
    _deadline_of_flight: int | None = None
    _fallback_since: int = 0

    def started(self, now: int, derived_deadline: int | None) -> None:
        self._inference += 1
        self.stats.inferences += 1
        if derived_deadline is None:
            self.deadline = None
        elif self.config.deadline_ms is not None:
            self.deadline = now + math.ceil(self.config.deadline_ms / (self.tick_s * 1e3) - 1e-9)
        else:
            self.deadline = derived_deadline
        self._deadline_of_flight = self.deadline

    def check(self, now: int) -> bool:
        """At `now`, with the inference still in flight: True when its deadline just passed (a miss)."""
        if self.deadline is None or now < self.deadline:
            return False
        due, self.deadline = self.deadline, None
        self.stats.misses += 1
        self.events.append(Event("miss", now, self._inference, "deadline passed", due))
        self._switch(now)
        return True

    def fault(self, now: int, error: str, ready_tick: int | None = None) -> None:
        self.deadline = None
        self.stats.faults += 1
        self.events.append(Event("fault", now, self._inference, error, ready_tick))
        self._switch(now)

    def fresh_chunk(self, now: int) -> None:
        """A valid chunk arrived: leave fallback mode."""
        if self._deadline_of_flight is not None and now > self._deadline_of_flight:
            self.stats.worst_lateness_ticks = max(
                self.stats.worst_lateness_ticks, now - self._deadline_of_flight
            )
        self.deadline = self._deadline_of_flight = None
        if self.in_fallback:
            self.in_fallback = False
            self.stats.returns += 1
            self.stats.fallback_ticks += now - self._fallback_since
            self.events.append(Event("return", now, self._inference))

    def _switch(self, now: int) -> None:
        if self.in_fallback:
            return
        self.in_fallback = True
        self._fallback_since = now
        self.stats.switches += 1
        self.events.append(Event("switch", now, self._inference, self.config.fallback))

    def counters(self, now: int | None = None) -> dict[str, int]:
        """Plain counters for a metrics exporter; `now` closes an open fallback interval."""
        out = asdict(self.stats)
        if self.in_fallback and now is not None:
            out["fallback_ticks"] += now - self._fallback_since
        return out
