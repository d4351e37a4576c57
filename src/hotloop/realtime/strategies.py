"""Execution strategies: when to ask the policy for a new chunk, and how a new chunk replaces the old.

Time is counted in clock ticks (the simulator's physics ticks, or the wall clock's ticks on a robot). A
chunk's action `i` is meant for the control period that starts at `origin + i * period`. A strategy
answers two questions (the `Strategy` protocol):

- `wants_inference(chunk)`: at a control boundary with no inference in flight, start one now?
- `splice(obs_tick, ready_tick, period)`: a chunk inferred on the observation of `obs_tick` is ready at
  `ready_tick`; return its (origin, first index to execute).

and states `overlaps` (whether the robot keeps executing the current chunk while the next is inferred;
if not, it holds its last target) and `guided` (whether the inference is sent the unexecuted tail of the
current chunk to inpaint, see `hotloop.realtime.rtc`).

Built in:
- `sync`: infer, hold while it runs, execute the first action, infer again (n = 1: the classic closed
  loop; every inference stalls the robot).
- `chunk`: infer, hold while it runs, execute the first n actions open loop (default half the
  horizon), infer again. Fewer stalls, staler plans.
- `async`: keep executing; start the next inference when k actions remain (default horizon // 2);
  splice the new chunk at the current timestep, dropping the actions whose time passed while it ran.
- `rtc`: async, and the policy inpaints the new chunk so that it continues the one being executed
  (real-time chunking, Black et al. 2025): its first d actions (d = the expected delay in control
  periods) are pulled onto what the robot executes meanwhile, the rest of the overlap softly.
- `rtc-prefix`: async, and the policy is given the d actions the robot executes meanwhile as the clean
  prefix of the new chunk and samples the rest (training-time action conditioning, Black, Galliker,
  Levine 2025; `hotloop.families.pi.rtc_prefix`). Needs a policy trained for it.
- `rtc-soft`: `rtc-prefix` over RTC's whole soft mask: the d executed actions are held, the tail of the
  mask starts part-way along the flow from the executing chunk, and the result is held to it by the mask
  (`soft_prefix_sample_actions`), so the new chunk leaves the old plan gradually. No gradient, one
  forward per step. It replans often by default (every max(d, 2) periods, d = the delay in periods):
  each chunk continues the last, so replanning often no longer switches plans, and on conveyor-pick at
  200 and 300 ms it then beats `async` with a tenth of its chunk jump (docs/realtime.md).
- `lerobot-async`: LeRobot's stock async `robot_client` (0.4.4+): keep executing; ask for a new chunk
  once at most `chunk_size_threshold` (0.5) of a chunk remains; merge it into the queue as the client
  does: actions for periods already started are dropped, where the queue still plans a period the two
  are averaged `0.3 * old + 0.7 * new` (its default `weighted_average`), the rest is the new chunk's
  (`LeRobotAsync.merge`). What a stock client gets from LeRobot's server, or `hotloop serve --protocol
  lerobot --strategy chunk`.
- `lerobot-rtc-soft`: the same client and merge, with the server conditioning each chunk on the client's
  queue (soft-prefix, as `rtc-soft`): what a stock client gets from `hotloop serve --protocol lerobot
  --strategy rtc-soft`. The client still asks at its threshold, not every max(d, 2) periods.
- `draft`: speculative chunks (FLASH-like, `hotloop.realtime.draft`): `rtc-soft`'s schedule (a new plan
  every max(d, 2) periods), and each inference first sends the executing chunk, shifted to the
  observation's time and padded to the horizon, as a draft: the policy checks it with a few evaluations
  of its velocity network and, where at least half a chunk agrees with the model within
  `draft_tolerance`, answers those rows only (the denoising loop does not run); otherwise it runs
  `rtc-soft`'s sampler. Needs a policy with a velocity network it can call (pi0/pi0.5 in PyTorch,
  SmolVLA eager or with the step engine). `draft_source` "student" (`hotloop eval --draft-from STUDENT`):
  the policy's draft is a one-step student's chunk, handed over from the executing one by the soft
  mask (pi0/pi0.5 in PyTorch), and an answer
  that says another source is refused.
- `ensemble`: ACT's temporal ensembling (Zhao et al. 2023; LeRobot's `ACTTemporalEnsembler`): infer at
  every control period the accelerator is free, keep executing meanwhile, and execute at each period the
  exponentially weighted average of every prediction for it among the chunks that have arrived by then
  (weights exp(-coeff * i), i = 0 the oldest; `hotloop.realtime.temporal_ensemble.TimedEnsembler`).
  The coefficient: `--ensemble-coeff`, else the policy's own (`strategy_defaults`, an ACT checkpoint's
  temporal_ensemble_coeff), else 0.01 (the ACT paper's). With no delay this is LeRobot's select_action
  exactly; with a delay of d periods, a chunk's first d actions are in the past when it arrives and only
  its later ones enter the averages.

A policy may declare how it is meant to be executed: `strategy_defaults`, a dict of `StrategyConfig`
fields (an ACT checkpoint: execute_steps = n_action_steps, ensemble_coeff = temporal_ensemble_coeff).
`apply_defaults` fills the fields a caller left unset with them, where the chosen strategy reads them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from hotloop.errors import ConfigError
from hotloop.realtime.draft import DEFAULT_TOLERANCE, SHIFTED, check_source, check_tolerance
from hotloop.realtime.rtc import DEFAULT_MAX_GUIDANCE_WEIGHT, MAX_GUIDANCE_WEIGHT
from hotloop.realtime.temporal_ensemble import TimedEnsembler, checked_weights
from hotloop.registry import Registry


@dataclass
class ActiveChunk:
    actions: np.ndarray  # (H, D)
    origin: int  # tick at which action 0 would start
    next_index: int  # index of the next action to start
    executed: int = 0  # actions of this chunk executed so far
    chunk_id: int = 0  # order of arrival in the episode, from 0

    @property
    def remaining(self) -> int:
        return max(0, len(self.actions) - self.next_index)

    def start_tick(self, index: int, period: int) -> int:
        return self.origin + index * period


@dataclass(frozen=True)
class StrategyConfig:
    horizon: int  # the policy's chunk length
    execute_steps: int | None = None  # n for chunk (sync is n = 1)
    trigger_remaining: int | None = None  # k for async and rtc
    max_guidance_weight: float = DEFAULT_MAX_GUIDANCE_WEIGHT  # beta for rtc
    ensemble_coeff: float | None = None  # the ensemble's exp(-coeff * i) (None: DEFAULT_ENSEMBLE_COEFF)
    draft_tolerance: float | None = None  # draft: the per-row error accepted (None: DEFAULT_TOLERANCE)
    draft_source: str | None = None  # draft: "shifted" or "student" (`--draft-from`; None: "shifted")

    def __post_init__(self) -> None:
        if self.horizon < 1:
            raise ConfigError(f"horizon must be >= 1 (got {self.horizon})")
        if self.execute_steps is not None and not 1 <= self.execute_steps <= self.horizon:
            raise ConfigError(f"--execute-steps must be in [1, {self.horizon}] (got {self.execute_steps})")
        if self.trigger_remaining is not None and not 0 <= self.trigger_remaining < self.horizon:
            raise ConfigError(
                f"--trigger-remaining must be in [0, {self.horizon - 1}] (got {self.trigger_remaining})"
            )
        if not 0 < self.max_guidance_weight <= MAX_GUIDANCE_WEIGHT:
            raise ConfigError(
                f"--guidance-weight must be a number > 0 and at most {MAX_GUIDANCE_WEIGHT:g} "
                f"(got {self.max_guidance_weight}; the paper uses 5, the default is {DEFAULT_MAX_GUIDANCE_WEIGHT:g})"
            )
        if self.ensemble_coeff is not None and (
            isinstance(self.ensemble_coeff, bool) or not math.isfinite(self.ensemble_coeff)
        ):
            raise ConfigError(f"--ensemble-coeff must be a finite number (got {self.ensemble_coeff})")
        if self.draft_tolerance is not None:
            check_tolerance(self.draft_tolerance)
        if self.draft_source is not None:
            check_source(self.draft_source)


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def overlaps(self) -> bool:
        """Whether the robot keeps executing the current chunk while the next one is inferred."""
        ...

    @property
    def guided(self) -> bool:
        """Whether the policy is asked to inpaint the new chunk onto the executing one (RTC)."""
        ...

    def wants_inference(self, chunk: ActiveChunk | None) -> bool: ...

    def splice(self, obs_tick: int, ready_tick: int, period: int) -> tuple[int, int]: ...

    def describe(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class HoldAndExecute:
    """Robot holds during inference, then executes `execute_steps` actions from the chunk's start."""

    name: str
    execute_steps: int
    overlaps: bool = False
    guided: bool = False

    def wants_inference(self, chunk: ActiveChunk | None) -> bool:
        return chunk is None or chunk.executed >= self.execute_steps or chunk.remaining == 0

    def splice(self, obs_tick: int, ready_tick: int, period: int) -> tuple[int, int]:
        # The robot stood still, so the plan starts now, from its first action.
        return ready_tick, 0

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "execute_steps": self.execute_steps, "overlaps": False}


def splice_by_time(obs_tick: int, ready_tick: int, period: int) -> tuple[int, int]:
    """Action i is for the period starting at obs_tick + i*period; those that started before the chunk
    was ready are in the past. The first still-future one starts at a boundary >= ready_tick."""
    return obs_tick, math.ceil((ready_tick - obs_tick) / period)


@dataclass(frozen=True)
class AsyncSplice:
    """Overlap inference with execution; splice by time, not by index."""

    trigger_remaining: int
    name: str = "async"
    overlaps: bool = True
    guided: bool = False

    def wants_inference(self, chunk: ActiveChunk | None) -> bool:
        return chunk is None or chunk.remaining <= self.trigger_remaining

    def splice(self, obs_tick: int, ready_tick: int, period: int) -> tuple[int, int]:
        return splice_by_time(obs_tick, ready_tick, period)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "trigger_remaining": self.trigger_remaining, "overlaps": True}


@dataclass(frozen=True)
class RealTimeChunking:
    """Async splicing, plus guidance: the inference gets the unexecuted tail of the current chunk and
    the expected delay, and inpaints the new chunk to continue it (see `hotloop.realtime.rtc`)."""

    trigger_remaining: int
    max_guidance_weight: float = DEFAULT_MAX_GUIDANCE_WEIGHT
    name: str = "rtc"
    overlaps: bool = True
    guided: bool = True
    mode: str = "guided"  # "guided": inference-time guidance; "prefix"/"soft-prefix": prefix conditioning

    def wants_inference(self, chunk: ActiveChunk | None) -> bool:
        return chunk is None or chunk.remaining <= self.trigger_remaining

    def splice(self, obs_tick: int, ready_tick: int, period: int) -> tuple[int, int]:
        return splice_by_time(obs_tick, ready_tick, period)

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "trigger_remaining": self.trigger_remaining,
            "overlaps": True,
            "mode": self.mode,
        }
        if self.mode == "guided":  # the prefix mode has no guidance weight (--guidance-weight is an error)
            out["max_guidance_weight"] = self.max_guidance_weight
        return out


@dataclass(frozen=True)
class SpeculativeDraft:
    """`rtc-soft`'s schedule and splice; each inference is sent the executing chunk as a draft to check
    (`hotloop.realtime.draft`, `MODE_KEY` "draft") with the tolerance, and may answer fewer rows than the
    horizon (the accepted prefix). `draft_source`: the draft the policy must have checked ("shifted", or
    "student" with `--draft-from`; the scheduler refuses an answer from another)."""

    trigger_remaining: int
    draft_tolerance: float = DEFAULT_TOLERANCE
    draft_source: str = SHIFTED
    name: str = "draft"
    overlaps: bool = True
    guided: bool = True
    mode: str = "draft"

    def wants_inference(self, chunk: ActiveChunk | None) -> bool:
        return chunk is None or chunk.remaining <= self.trigger_remaining

    def splice(self, obs_tick: int, ready_tick: int, period: int) -> tuple[int, int]:
        return splice_by_time(obs_tick, ready_tick, period)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "trigger_remaining": self.trigger_remaining,
            "overlaps": True,
            "mode": self.mode,
            "draft_tolerance": self.draft_tolerance,
            "draft_source": self.draft_source,
        }


LEROBOT_THRESHOLD = 0.5  # the stock client's chunk_size_threshold
LEROBOT_OLD_WEIGHT, LEROBOT_NEW_WEIGHT = 0.3, 0.7  # its default aggregate, weighted_average


@dataclass(frozen=True)
class LeRobotAsync:
    """LeRobot's stock async client (`lerobot.async_inference.robot_client`): `wants_inference` at its
    threshold (queue / chunk length <= 0.5, i.e. at most `trigger_remaining` actions left), splice by time
    (its timesteps: action i of a chunk is for the period i after the observation; those already started
    are dropped) and `merge` as its `_aggregate_action_queues`. `mode` "soft-prefix" adds the server-side
    conditioning of `hotloop serve --protocol lerobot --strategy rtc-soft` (the guidance rows are then the
    merged queue, which is what the client executes)."""

    trigger_remaining: int
    name: str = "lerobot-async"
    overlaps: bool = True
    guided: bool = False
    mode: str = "guided"

    def wants_inference(self, chunk: ActiveChunk | None) -> bool:
        return chunk is None or chunk.remaining <= self.trigger_remaining

    def splice(self, obs_tick: int, ready_tick: int, period: int) -> tuple[int, int]:
        return splice_by_time(obs_tick, ready_tick, period)

    def merge(
        self, actions: np.ndarray, origin: int, first: int, queue: ActiveChunk, period: int
    ) -> np.ndarray:
        """The client's queue after `actions` (origin `origin`, first still-future index `first`) meets
        `queue`: rows whose period the queue still plans (not yet executed) are 0.3 queue + 0.7 new."""
        merged = np.array(actions, dtype=np.float64, copy=True)
        for j in range(first, len(merged)):
            offset = origin + j * period - queue.origin
            k = offset // period
            if offset % period == 0 and queue.next_index <= k < len(queue.actions):
                merged[j] = LEROBOT_OLD_WEIGHT * queue.actions[k] + LEROBOT_NEW_WEIGHT * merged[j]
        return merged

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "trigger_remaining": self.trigger_remaining,
            "overlaps": True,
        }
        out["merge"] = f"{LEROBOT_OLD_WEIGHT} old + {LEROBOT_NEW_WEIGHT} new"
        if self.guided:
            out["mode"] = self.mode
        return out


def _lerobot_trigger(cfg: StrategyConfig) -> int:
    if cfg.trigger_remaining is not None:
        return cfg.trigger_remaining
    return math.floor(LEROBOT_THRESHOLD * cfg.horizon)  # qsize / chunk size <= threshold


def _lerobot_async(cfg: StrategyConfig) -> Strategy:
    return LeRobotAsync(_lerobot_trigger(cfg))


def _lerobot_rtc_soft(cfg: StrategyConfig) -> Strategy:
    return LeRobotAsync(_lerobot_trigger(cfg), name="lerobot-rtc-soft", guided=True, mode="soft-prefix")


DEFAULT_ENSEMBLE_COEFF = 0.01  # the ACT paper's (LeRobot's docs recommend it too)


@dataclass(frozen=True)
class TemporalEnsembling:
    """Infer whenever the engine is free (at most once per control period), keep executing, and execute
    at each period the LeRobot-exact ensemble of the chunks that have arrived (`TimedEnsembler`).

    `wants_inference`: a chunk that arrived with its next action still due (`next_index` 0, no delay)
    is first executed once; after that each control boundary with no inference in flight starts one.
    The scheduler's grid rule (observe only on the running chunk's grid) keeps one observation per
    period. `blender(period)` gives the scheduler the action former it executes through."""

    coeff: float
    horizon: int
    name: str = "ensemble"
    overlaps: bool = True
    guided: bool = False

    def wants_inference(self, chunk: ActiveChunk | None) -> bool:
        return chunk is None or chunk.remaining == 0 or chunk.next_index >= 1

    def splice(self, obs_tick: int, ready_tick: int, period: int) -> tuple[int, int]:
        return splice_by_time(obs_tick, ready_tick, period)

    def blender(self, period: int) -> TimedEnsembler:
        return TimedEnsembler(self.coeff, self.horizon, period)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "ensemble_coeff": self.coeff, "overlaps": True}


def _ensemble(cfg: StrategyConfig) -> Strategy:
    coeff = cfg.ensemble_coeff if cfg.ensemble_coeff is not None else DEFAULT_ENSEMBLE_COEFF
    checked_weights(coeff, cfg.horizon)  # a coefficient whose weights overflow is refused now
    return TemporalEnsembling(coeff, cfg.horizon)


def _sync(cfg: StrategyConfig) -> Strategy:
    if cfg.execute_steps not in (None, 1):
        raise ConfigError("sync executes one action per inference; use --strategy chunk for --execute-steps")
    return HoldAndExecute("sync", 1)


def _chunk(cfg: StrategyConfig) -> Strategy:
    return HoldAndExecute("chunk", cfg.execute_steps or max(1, cfg.horizon // 2))


def _trigger(cfg: StrategyConfig) -> int:
    # Default: start the next inference when half the chunk remains (LeRobot's async client triggers at
    # the same fraction, chunk_size_threshold 0.5): up to H/2 periods of latency are hidden, and each plan
    # runs long enough to finish what it starts. The demo policy, 50 episodes at 0/100/200/300 ms:
    # k = 8 gave 100/96/92/86 %, k = 14 (replan every 2 actions) 64/68/56/72 %.
    return cfg.trigger_remaining if cfg.trigger_remaining is not None else cfg.horizon // 2


def frequent_trigger(cfg: StrategyConfig) -> int:
    """k = H - 2: a new plan every max(d, 2) control periods (d = the delay in periods), each observed at
    the first control boundary after the last chunk is in once d >= 2: RTC's own setting (Black et al.
    2025 run inference continuously). A chunk that continues the last can be replaced often without
    switching plans, and the fresher observation is then pure gain."""
    if cfg.trigger_remaining is not None:
        return cfg.trigger_remaining
    # demo:conveyor, conveyor-pick medium, seeds 0-99, success at 200 / 300 ms (jump, mm), by k:
    #   rtc-soft  k=8 91/89 (13.5/16.8) · k=10 96/90 · k=12 100/29 · k=13 43/100 · k=14, 15 99/100 (3.5/6.7)
    #   async     k=8 92/92 (46.6/57.7) · k=10 100/96 · k=12 97/54 · k=13 82/77 · k=14, 15 51/77 (69.5/81.3)
    # A new chunk every max(d, H - k) periods: d + 1 (k = 12 at 300 ms, k = 13 at 200 ms) is the worst
    # for both; every d periods the best for rtc-soft and the worst for async (0 / 100 ms at k = 15:
    # 99 / 6 %), rtc-prefix (99 / 41 %) and guided rtc (200 / 300 ms: 29 / 39 %), which keep H/2. At 0 /
    # 100 ms (seeds 5000-5199) rtc-soft did better at k = 14 than at 15 (195 / 196 against 191 / 188 of
    # 200), and replans half as often there.
    return max(0, cfg.horizon - 2)


def _async(cfg: StrategyConfig) -> Strategy:
    return AsyncSplice(_trigger(cfg))


def _rtc(cfg: StrategyConfig) -> Strategy:
    return RealTimeChunking(_trigger(cfg), cfg.max_guidance_weight)


def _rtc_prefix(cfg: StrategyConfig) -> Strategy:
    return RealTimeChunking(_trigger(cfg), name="rtc-prefix", mode="prefix")


def _rtc_soft(cfg: StrategyConfig) -> Strategy:
    return RealTimeChunking(frequent_trigger(cfg), name="rtc-soft", mode="soft-prefix")


def _draft(cfg: StrategyConfig) -> Strategy:
    tolerance = cfg.draft_tolerance if cfg.draft_tolerance is not None else DEFAULT_TOLERANCE
    return SpeculativeDraft(frequent_trigger(cfg), tolerance, cfg.draft_source or SHIFTED)


def default_strategies() -> Registry[Callable[[StrategyConfig], Strategy]]:
    registry: Registry[Callable[[StrategyConfig], Strategy]] = Registry("strategy")
    registry.register("sync", _sync)
    registry.register("chunk", _chunk)
    registry.register("async", _async)
    registry.register("rtc", _rtc)
    registry.register("rtc-prefix", _rtc_prefix)
    registry.register("rtc-soft", _rtc_soft)
    registry.register("ensemble", _ensemble)
    registry.register("draft", _draft)
    registry.register("lerobot-async", _lerobot_async)
    registry.register("lerobot-rtc-soft", _lerobot_rtc_soft)
    return registry


def make_strategy(name: str, config: StrategyConfig) -> Strategy:
    return default_strategies().get(name)(config)


def apply_defaults(name: str, config: StrategyConfig, defaults: Mapping[str, Any] | None) -> StrategyConfig:
    """`config` with the fields its caller left unset (None) taken from a policy's `strategy_defaults`,
    each where strategy `name` reads it (the strategy it makes differs) and accepts it; the others are
    left unset (an ACT checkpoint's n_action_steps is `chunk`'s, not `sync`'s)."""
    if not defaults:
        return config
    fields = {f.name for f in dataclasses.fields(StrategyConfig)} - {"horizon"}
    unknown = sorted(set(defaults) - fields)
    if unknown:
        raise ConfigError(
            f"the policy declares strategy_defaults {', '.join(unknown)}, which no strategy takes "
            f"(known: {', '.join(sorted(fields))})"
        )
    for field, value in defaults.items():
        if getattr(config, field) is not None:
            continue  # the caller's own value wins
        try:
            trial = dataclasses.replace(config, **{field: value})
            changed = make_strategy(name, trial).describe() != make_strategy(name, config).describe()
        except ConfigError:
            continue  # this strategy refuses the value (sync and execute_steps > 1): not its default
        if changed:
            config = trial
    return config


def policy_strategy(name: str, policy: Any, **options: Any) -> Callable[[int], Strategy]:
    """`make_strategy(horizon)` for a scheduler: strategy `name` with `options` (StrategyConfig fields),
    the horizon the first chunk shows, and the policy's declared `strategy_defaults` for the fields not
    given (a robot-side `hotloop.client.PolicyClient` carries the served policy's)."""
    defaults = dict(getattr(policy, "strategy_defaults", None) or {})
    default_strategies().get(name)  # an unknown name fails now, not at the first chunk

    def make(horizon: int) -> Strategy:
        return make_strategy(name, apply_defaults(name, StrategyConfig(horizon, **options), defaults))

    return make
