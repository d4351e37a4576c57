"""The chunk scheduler: one state machine, driven by the closed-loop evaluator and by a robot's runner.

It never reads a clock and never calls a policy itself: a driver (`hotloop.realtime.runner.run_loop`)
tells it the tick, asks it whether to start an inference (and with which RTC guidance inputs), hands
it finished inferences, and asks it what to command next (a `Segment`). So the simulator and a robot
run exactly the same decisions; only the clock and the engine differ.

Bookkeeping it keeps for metrics: `jumps` (distance between the first commanded position of a new
chunk and what the replaced plan would have commanded in that period, or the held target; both as the
plant executes them, i.e. clipped to `action_bounds` when given), the inference delays in control
periods, and the watchdog's events and counters.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hotloop.errors import ConfigError
from hotloop.realtime.blending import BlendConfig, ChunkBlender
from hotloop.realtime.rtc import (
    DELAY_KEY,
    GUIDED_KEY,
    MAX_GUIDANCE_WEIGHT_KEY,
    MODE_KEY,
    PREV_ACTIONS_KEY,
)
from hotloop.realtime.strategies import ActiveChunk, Strategy
from hotloop.realtime.watchdog import DeadlineWatchdog, Event, WatchdogConfig

FALLBACK_CHUNK = -2  # chunk id of a fallback engine's chunks in segments


class Blender(Protocol):
    """What forms an executed action from the chunks that plan its period (`ChunkBlender`, or the
    strategy's own: `TimedEnsembler`)."""

    def add(self, actions: np.ndarray, origin: int) -> None: ...

    def action(self, actions: np.ndarray, index: int, start: int) -> np.ndarray: ...


@dataclass(frozen=True)
class SchedulerConfig:
    blend: BlendConfig = field(default_factory=BlendConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    delay_window: int = 5  # RTC: the expected delay is the largest of the last N inferences' delays

    def __post_init__(self) -> None:
        if self.delay_window < 1:
            raise ConfigError(f"delay_window must be >= 1 (got {self.delay_window})")


@dataclass(frozen=True)
class Completion:
    """A finished inference: its output (or why there is none), and when it was observed and ready."""

    obs_tick: int
    ready_tick: int
    output: dict[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True)
class Segment:
    """Command `action` from `start` until `end` (None: until the inference in flight completes).
    `wake_on_result`: a completed inference ends the segment early (the robot is waiting for it)."""

    start: int
    end: int | None
    action: np.ndarray
    chunk: int  # chunk id; -1 when holding, FALLBACK_CHUNK for a fallback engine's chunk
    index: int  # action index in that chunk; -1 when holding
    source: str  # "chunk" | "hold" | "fallback"
    wake_on_result: bool


def chunk_actions(output: Any, action_dim: int | None) -> np.ndarray:
    """The (H, D) float64 actions of a policy output; a wrong shape is a configuration error (every
    inference would fail the same way); non-finite values are left for the watchdog to see."""
    if not isinstance(output, dict) or "actions" not in output:
        raise ConfigError(
            "policy.infer must return a dict with an 'actions' array of shape (horizon, action_dim)"
        )
    actions = np.asarray(output["actions"], dtype=np.float64)
    if actions.ndim == 3 and actions.shape[0] == 1:
        actions = actions[0]
    if (
        actions.ndim != 2
        or actions.shape[0] < 1
        or (action_dim is not None and actions.shape[1] != action_dim)
    ):
        want = f"(horizon, {action_dim})" if action_dim is not None else "(horizon, action_dim)"
        raise ConfigError(f"policy returned actions of shape {actions.shape}; this task needs {want}")
    return actions


class ChunkScheduler:
    """See the module docstring. `make_strategy(horizon)` is called when the first chunk shows the
    policy's horizon. `fallback_policy` is the smaller engine for the `engine` fallback."""

    def __init__(
        self,
        make_strategy: Callable[[int], Strategy],
        period: int,
        tick_s: float,
        *,
        action_dim: int | None = None,
        config: SchedulerConfig | None = None,
        fallback_policy: Any = None,
        action_bounds: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.config = config or SchedulerConfig()
        # The plant clips what it is commanded to these (the task's action space): jumps are measured on
        # what it executes, not on a policy output far outside the workspace.
        self.action_bounds = action_bounds
        if self.config.watchdog.fallback == "engine" and fallback_policy is None:
            raise ConfigError("--fallback engine needs a fallback policy (a second, smaller engine)")
        if period < 1:
            raise ConfigError(f"control period must be >= 1 tick (got {period})")
        self.make_strategy = make_strategy
        self.period = period
        self.tick_s = tick_s
        self.action_dim = action_dim
        self.fallback_policy = fallback_policy
        self.strategy: Strategy | None = None
        self.active: ActiveChunk | None = None
        self.suspended: ActiveChunk | None = None  # the chunk a hold-while-inferring strategy left
        self.blender: Blender = ChunkBlender(self.config.blend, period)
        self.watchdog = DeadlineWatchdog(self.config.watchdog, period, tick_s)
        self.chunks = 0
        self.jumps: list[float] = []
        self.delays: list[int] = []  # per chunk: control periods from observation to readiness
        self.stale_dropped = 0  # actions skipped because their period had passed (a late wall clock)
        self._in_flight: int | None = None  # obs tick of the inference in flight
        self._guided = False  # the inference in flight was sent guidance
        self._planned_next: np.ndarray | None = None
        self._recent: deque[np.ndarray] = deque(maxlen=2)  # last executed chunk actions (for `stop`)
        self._fallback_chunk: ActiveChunk | None = None
        self._stop_pos: np.ndarray | None = None
        self._stop_vel: np.ndarray | None = None

    # --- inference lifecycle ------------------------------------------------------------------
    @property
    def in_flight(self) -> bool:
        return self._in_flight is not None

    @property
    def deadline(self) -> int | None:
        return self.watchdog.deadline if self.in_flight else None

    def wants_inference(self, now: int | None = None) -> bool:
        """Start an inference on the observation of `now`? With `now`, an overlapping strategy observes
        only on the running chunk's grid: a chunk installed mid-period waits for its next action to
        start, so the new plan lines up with it (RTC's inputs need that) and a trigger of H - 1 cannot
        replace a chunk again and again before any of its actions ran."""
        if self.in_flight:
            return False
        if self.strategy is None or self.watchdog.in_fallback:
            return True  # no plan yet, or the last one failed: ask again
        a = self.active
        if (
            now is not None
            and self.strategy.overlaps
            and a is not None
            and a.remaining > 0
            and a.start_tick(a.next_index, self.period) > now
        ):
            return False
        return self.strategy.wants_inference(a)

    def expected_delay(self) -> int:
        """RTC's d: the largest delay (control periods) of the recent inferences."""
        recent = self.delays[-self.config.delay_window :]
        return max(recent) if recent else 0

    def guidance(self, now: int) -> dict[str, Any]:
        """RTC inputs for an inference observed at `now` (empty for other strategies): the unexecuted
        actions of the current chunk, aligned so that row i is meant for the period starting at
        now + i * period, and the expected delay d."""
        s, a = self.strategy, self.active
        if s is None or not s.guided or a is None or a.remaining == 0:
            return {}
        if a.start_tick(a.next_index, self.period) != now:
            return {}  # not on the chunk's grid (only right after a hold): nothing to align to
        out: dict[str, Any] = {
            PREV_ACTIONS_KEY: a.actions[a.next_index :].copy(),
            DELAY_KEY: self.expected_delay(),
            MAX_GUIDANCE_WEIGHT_KEY: float(getattr(s, "max_guidance_weight", 0.0)),
            MODE_KEY: self._mode(),
        }
        tolerance = getattr(s, "draft_tolerance", None)
        if tolerance is not None:  # `draft`: the rows are a draft to check, within this tolerance
            from hotloop.realtime.draft import TOLERANCE_KEY

            out[TOLERANCE_KEY] = float(tolerance)
        return out

    def _mode(self) -> str:
        return str(getattr(self.strategy, "mode", "guided"))

    def started(self, now: int, guided: bool = False) -> None:
        """An inference on the observation of `now` was started (`guided`: with `guidance(now)`)."""
        self._in_flight = now
        self._guided = guided
        derived: int | None = None
        if self.strategy is not None:
            a = self.active
            if self.strategy.overlaps and a is not None and a.remaining > 0:
                derived = a.start_tick(len(a.actions), self.period)  # when the robot runs out of plan
            else:
                derived = now + self.period
        self.watchdog.started(now, derived)
        if self.strategy is not None and not self.strategy.overlaps and self.active is not None:
            a = self.active
            self._planned_next = a.actions[a.next_index] if a.remaining > 0 else None
            self.suspended, self.active = a, None  # the robot stops and waits for the new plan

    def check_deadline(self, now: int) -> None:
        if self.in_flight and self.watchdog.check(now):
            self._enter_fallback()

    def completed(self, done: Completion, hold: np.ndarray, now: int | None = None) -> None:
        """Install a finished inference, or record its fault; `now` is when the runner saw it (default:
        when it was ready)."""
        self._in_flight = None
        now = done.ready_tick if now is None else now
        if done.error is not None:
            self._fault(now, done.error, done.ready_tick)
            return
        actions = chunk_actions(done.output, self.action_dim)
        if not np.all(np.isfinite(actions)):
            self._fault(now, "policy returned non-finite actions", done.ready_tick)
            return
        if self.strategy is None:
            self.strategy = self.make_strategy(len(actions))
            self._strategy_blender()
        assert done.output is not None
        if self._guided and self._mode() == "draft" and done.output.get(MODE_KEY) != "draft":
            from hotloop.realtime.draft import draft_refusal

            raise ConfigError(draft_refusal("this policy") + " (it answered without checking the draft)")
        if self._guided and self._mode() == "draft":
            self._check_draft_source(done.output)
        if self._guided and not done.output.get(GUIDED_KEY):
            raise ConfigError(
                f"--strategy {self.strategy.name} sends the unexecuted actions to the policy to inpaint, "
                "but this policy ignored them; use a policy with a guided sampler (demo:conveyor, pi0 "
                "targets; a compiled artifact has none) or --strategy async"
            )
        if self._guided and self._mode() != "guided" and done.output.get(MODE_KEY) != self._mode():
            raise ConfigError(
                f"--strategy {self.strategy.name} gives the policy the executing actions as a prefix to "
                "continue, but this policy did not condition on it (it answered rtc_mode "
                f"{done.output.get(MODE_KEY, 'guided')!r}); use a pi0/pi0.5 policy in PyTorch "
                "(demo:conveyor) or --strategy rtc"
            )
        period = self.period
        self.delays.append(max(0, math.ceil((done.ready_tick - done.obs_tick) / period)))
        origin, first = self.strategy.splice(done.obs_tick, done.ready_tick, period)
        merge = getattr(self.strategy, "merge", None)  # a strategy that merges chunks as its client does
        if merge is not None and self.active is not None and self.active.remaining > 0:
            actions = merge(actions, origin, first, self.active, period)
        new = ActiveChunk(actions, origin, first, chunk_id=self.chunks)
        self.blender.add(actions, origin)
        if self.strategy.overlaps and self.active is not None and self.active.remaining > 0:
            self._planned_next = self.active.actions[self.active.next_index]
        if self.chunks > 0 and new.remaining > 0:
            reference = self._planned_next if self._planned_next is not None else hold
            first_action = self.blender.action(actions, first, new.start_tick(first, period))
            jump = self._executed(first_action)[:3] - self._executed(reference)[:3]
            self.jumps.append(float(np.linalg.norm(jump)))
        self.active, self.suspended, self._planned_next = new, None, None
        self.chunks += 1
        if new.remaining == 0 and self.watchdog.in_fallback:
            # Every action of this chunk is already in the past: nothing fresh to return to.
            self.watchdog.events.append(Event("stale", now, self.watchdog.stats.inferences - 1))
            return
        self.watchdog.fresh_chunk(now)
        self._fallback_chunk = None

    def _check_draft_source(self, output: dict[str, Any]) -> None:
        """A `draft` answer must have checked the draft the strategy asks for (`draft_source`): a policy
        that answered from the shifted chunk when a student's was asked (`--draft-from`), or the other way
        round, would run another method than the one reported, so it is refused by name."""
        from hotloop.realtime.draft import DRAFT_FROM_FLAG, DRAFT_KEY, SHIFTED, source_of

        want = str(getattr(self.strategy, "draft_source", SHIFTED))
        stats = output.get(DRAFT_KEY)
        got = source_of(stats) if isinstance(stats, dict) else SHIFTED
        if got != want:
            raise ConfigError(
                f"--strategy draft asked for a {want} draft, and the policy answered with a {got} one: give "
                f"{DRAFT_FROM_FLAG} STUDENT to a policy that loaded it (`hotloop eval`), or drop it"
            )

    def _executed(self, action: np.ndarray) -> np.ndarray:
        action = np.asarray(action, dtype=np.float64)
        if self.action_bounds is None:
            return action
        return np.clip(action, self.action_bounds[0], self.action_bounds[1])

    def _strategy_blender(self) -> None:
        """A strategy that forms the executed actions itself (`ensemble`: `blender(period)`) replaces
        the configured blending; asking for both is a configuration error, not a silent choice."""
        make = getattr(self.strategy, "blender", None)
        if make is None:
            return
        if self.config.blend.kind != "latest":
            raise ConfigError(
                f"--blend {self.config.blend.kind} with --strategy {getattr(self.strategy, 'name', '?')}: "
                "that strategy forms every executed action itself; drop --blend"
            )
        self.blender = make(self.period)

    def _fault(self, now: int, error: str, ready_tick: int | None = None) -> None:
        self.watchdog.fault(now, error, ready_tick)
        self._enter_fallback()

    # --- what to command ------------------------------------------------------------------------
    def next_segment(self, now: int, hold: np.ndarray, observe: Callable[[], dict[str, Any]]) -> Segment:
        if self.watchdog.in_fallback:
            return self._fallback_segment(now, hold, observe)
        s, a = self.strategy, self.active
        if a is not None and a.remaining > 0 and s is not None and (s.overlaps or not self.in_flight):
            seg = self._execute(a, now, hold, wake_on_result=False)
            if seg is not None:
                return seg
        if self.in_flight:
            return Segment(now, None, hold, -1, -1, "hold", True)
        # Nothing to do and nothing coming: cannot happen with a sane strategy; hold one period.
        return Segment(now, now + self.period, hold, -1, -1, "hold", False)

    def _execute(self, a: ActiveChunk, now: int, hold: np.ndarray, wake_on_result: bool) -> Segment | None:
        period = self.period
        start = a.start_tick(a.next_index, period)
        while a.remaining > 0 and start + period <= now:  # its period is over (a late wall clock): drop
            a.next_index += 1
            self.stale_dropped += 1
            start += period
        if a.remaining == 0:
            return None
        if start > now:  # the chunk's next action is not due yet (async splice after a hold)
            return Segment(now, start, hold, -1, -1, "hold", wake_on_result)
        index = a.next_index
        action = self.blender.action(a.actions, index, start) if a.chunk_id >= 0 else a.actions[index]
        a.next_index += 1
        a.executed += 1
        self._recent.append(np.asarray(action, dtype=np.float64))
        return Segment(now, start + period, action, a.chunk_id, index, "chunk", wake_on_result)

    # --- fallbacks ----------------------------------------------------------------------------
    def _enter_fallback(self) -> None:
        self._fallback_chunk = None
        self._stop_pos = self._stop_vel = None
        if self.config.watchdog.fallback == "continue" and self.active is None and self.suspended is not None:
            # A hold-while-inferring strategy stopped this chunk; its remaining actions resume from now.
            self.active, self.suspended = self.suspended, None

    def _fallback_segment(self, now: int, hold: np.ndarray, observe: Callable[[], dict[str, Any]]) -> Segment:
        kind = self.config.watchdog.fallback
        period = self.period
        if kind == "continue" and self.active is not None and self.active.remaining > 0:
            a = self.active
            start = a.start_tick(a.next_index, period)
            if start + period <= now:  # the robot held past these actions' times: run them from now
                a.origin += now - start
            seg = self._execute(a, now, hold, wake_on_result=True)
            if seg is not None:
                return Segment(seg.start, seg.end, seg.action, seg.chunk, seg.index, "fallback", True)
        if kind == "stop":
            if self._stop_pos is None:
                self._stop_pos = np.asarray(hold, dtype=np.float64).copy()
                t = period * self.tick_s
                recent = list(self._recent)
                self._stop_vel = (
                    (recent[-1] - recent[-2]) / t if len(recent) == 2 else np.zeros_like(self._stop_pos)
                )
            assert self._stop_vel is not None
            t = period * self.tick_s
            speed = np.abs(self._stop_vel)
            # v <- v - sign(v) * min(|v|, a*T): the commanded speed falls by at most max_decel * T per period
            self._stop_vel = np.sign(self._stop_vel) * np.maximum(
                speed - self.config.watchdog.max_decel * t, 0.0
            )
            self._stop_pos = self._stop_pos + self._stop_vel * t
            return Segment(now, now + period, self._stop_pos.copy(), -1, -1, "fallback", True)
        if kind == "engine":
            fc = self._fallback_chunk
            if fc is None or fc.remaining == 0:
                fc = self._fallback_chunk = self._fallback_engine_chunk(now, observe)
            if fc is not None:
                seg = self._execute(fc, now, hold, wake_on_result=True)
                if seg is not None:
                    return Segment(
                        seg.start, seg.end, seg.action, FALLBACK_CHUNK, seg.index, "fallback", True
                    )
        return Segment(now, now + period, hold, -1, -1, "fallback", True)

    def _fallback_engine_chunk(self, now: int, observe: Callable[[], dict[str, Any]]) -> ActiveChunk | None:
        """The smaller engine's plan from the current observation (its own time is not simulated: it is
        the engine chosen to fit inside a control period)."""
        try:
            actions = chunk_actions(self.fallback_policy.infer(observe()), self.action_dim)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - a failing fallback engine leaves the robot holding
            self._fallback_fault(now, f"{type(e).__name__}: {e}")
            return None
        if not np.all(np.isfinite(actions)):
            self._fallback_fault(now, "non-finite actions")
            return None
        return ActiveChunk(actions, now, 0, chunk_id=FALLBACK_CHUNK)

    def _fallback_fault(self, now: int, detail: str) -> None:
        self.watchdog.events.append(Event("fallback_fault", now, self.watchdog.stats.inferences - 1, detail))
