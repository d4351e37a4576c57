"""The closed-loop episode: simulated time advances while the policy thinks.

The loop runs on the physics clock (ticks of `physics_dt`). At each decision point it (1) installs a
chunk whose inference has finished, as the strategy splices it, (2) starts an inference if the strategy
wants one — the policy sees the observation of *this* tick, and the result becomes available
`latency` later in simulated time — and (3) executes the next action of the active chunk for one control
period, or holds the last target while the robot waits. Only one inference is in flight at a time (one
accelerator). The real inference time is measured every call; the latency model decides whether that is
the simulated delay (`measured`) or something else (`fixed:MS`, a replayed bench distribution).

Latency is rounded up to whole physics ticks (2 ms), not to control periods, so a 50 ms delay is 50 ms.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.sim.latency import LatencyModel
from hotloop.sim.metrics import mean_std, rms_jerk, wilson_interval
from hotloop.sim.strategies import ActiveChunk, Strategy

SAMPLE_TICKS = 5  # the end effector is sampled every 5 ticks (10 ms) for the jerk metric


@dataclass
class _Pending:
    actions: np.ndarray
    obs_tick: int
    ready_tick: int


def _check_actions(out: Any, action_dim: int) -> np.ndarray:
    if not isinstance(out, dict) or "actions" not in out:
        raise ConfigError(
            "policy.infer must return a dict with an 'actions' array of shape (horizon, action_dim)"
        )
    actions = np.asarray(out["actions"], dtype=np.float64)
    if actions.ndim == 3 and actions.shape[0] == 1:
        actions = actions[0]
    if actions.ndim != 2 or actions.shape[1] != action_dim or actions.shape[0] < 1:
        raise ConfigError(
            f"policy returned actions of shape {actions.shape}; this task needs (horizon, {action_dim})"
        )
    if not np.all(np.isfinite(actions)):
        raise ConfigError("policy returned non-finite actions")
    return actions


def run_episode(
    env: Any,
    policy: Any,
    make_strategy: Callable[[int], Strategy],
    latency: LatencyModel,
    seed: int,
    *,
    trace: bool = False,
) -> dict[str, Any]:
    """Run one episode; returns its record (see `summarize` for the fields). `trace=True` adds
    `trace`: one (start_tick, end_tick, chunk_id, action_index) per executed segment, index -1 = hold,
    and `inference_ticks`: one (obs_tick, ready_tick) per inference."""
    env.reset(seed=seed)
    policy.reset()
    rng = np.random.default_rng([seed, 0x1A7])  # latency draws: repeatable per episode seed
    dt = env.config.physics_dt
    period = env.config.ticks_per_control
    max_ticks = round(env.config.time_limit_s / dt)
    action_dim = env.action_space.shape[0]
    sample = min(SAMPLE_TICKS, period)  # gym: tasks act every tick: sample every tick there

    strategy: Strategy | None = None
    active: ActiveChunk | None = None
    pending: _Pending | None = None
    planned_next: np.ndarray | None = None  # what the replaced plan would have done next
    chunks = 0
    success = failed = False
    first = env.ee_pos()  # None: the task tracks no position (some gym: envs), so no jerk
    ee: list[np.ndarray] | None = None if first is None else [first]
    latencies: list[float] = []
    measured: list[float] = []
    jumps: list[float] = []
    segments: list[tuple[int, int, int, int]] = []
    inferences: list[tuple[int, int]] = []

    while True:
        now = env.tick
        if pending is not None and pending.ready_tick <= now:
            assert strategy is not None
            origin, first = strategy.splice(pending.obs_tick, pending.ready_tick, period)
            new = ActiveChunk(pending.actions, origin, first)
            if strategy.overlaps and active is not None and active.remaining > 0:
                planned_next = active.actions[active.next_index]
            if chunks > 0 and new.remaining > 0:
                reference = planned_next if planned_next is not None else env.hold_action()
                jumps.append(float(np.linalg.norm(new.actions[first][:3] - reference[:3])))
            active, pending, planned_next = new, None, None
            chunks += 1
            continue  # the new chunk may already want the next inference (async, short chunks)

        if pending is None and (strategy is None or strategy.wants_inference(active)):
            obs = env.observe()
            t0 = time.perf_counter()
            out = policy.infer(obs)
            real_ms = (time.perf_counter() - t0) * 1e3
            actions = _check_actions(out, action_dim)
            if strategy is None:
                strategy = make_strategy(len(actions))
            lat_ms = latency.sample_ms(real_ms, rng)
            measured.append(real_ms)
            latencies.append(lat_ms)
            ready = now + math.ceil(lat_ms / (dt * 1e3) - 1e-9)
            if not strategy.overlaps and active is not None:
                planned_next = active.actions[active.next_index] if active.remaining > 0 else None
                active = None  # the robot stops and waits for the new plan
            pending = _Pending(actions, now, ready)
            inferences.append((now, ready))
            if ready == now:
                continue

        assert strategy is not None
        index = -1
        action = env.hold_action()
        if active is not None and active.remaining > 0 and (strategy.overlaps or pending is None):
            start = active.origin + active.next_index * period
            if start > now:  # the chunk's next action is not due yet (async splice after a hold)
                end = start
            else:
                index = active.next_index
                action = active.actions[index]
                end = start + period
                active.next_index += 1
                active.executed += 1
        elif pending is not None:
            end = pending.ready_tick
        else:  # nothing to do and nothing coming: cannot happen with a sane strategy; hold one period
            end = now + period
        if pending is not None and not strategy.overlaps:
            end = min(end, pending.ready_tick)
        end = min(end, max_ticks)
        if end <= now:
            break
        segments.append((now, end, chunks - 1 if index >= 0 else -1, index))
        while env.tick < end:
            success, failed = env.advance(action, min(sample, end - env.tick))
            if ee is not None:
                ee.append(env.ee_pos())
            if success or failed:
                break
        if success or failed or env.tick >= max_ticks:
            break

    record: dict[str, Any] = {
        "seed": seed,
        "success": bool(success),
        "failed": bool(failed),
        "timed_out": not success and not failed,
        "task_time_s": env.time_s if success else None,
        "sim_time_s": env.time_s,
        "inferences": len(latencies),
        "latency_ms": {
            "mean": float(np.mean(latencies)) if latencies else 0.0,
            "max": float(np.max(latencies)) if latencies else 0.0,
        },
        "infer_wall_ms": {"mean": float(np.mean(measured)) if measured else 0.0},
        "jerk": None if ee is None else rms_jerk(np.asarray(ee), sample * dt),
        "chunk_discontinuity": float(np.mean(jumps)) if jumps else None,
        "boundaries": len(jumps),
        "info": env.info(),
        "error": None,
    }
    if trace:
        record["trace"] = segments
        record["inference_ticks"] = inferences
    return record


def failed_record(seed: int, error: str) -> dict[str, Any]:
    """A crashed or raising episode: counted as a failure, never skipped."""
    return {
        "seed": seed,
        "success": False,
        "failed": True,
        "timed_out": False,
        "task_time_s": None,
        "sim_time_s": None,
        "inferences": 0,
        "latency_ms": {"mean": None, "max": None},
        "infer_wall_ms": {"mean": None},
        "jerk": None,
        "chunk_discontinuity": None,
        "boundaries": 0,
        "info": {},
        "error": error,
    }


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate episode records: success rate + Wilson 95% interval; task time over successes;
    jerk = mean of per-episode RMS jerk (m/s^3); chunk_discontinuity = mean jump (m) of the commanded
    position at chunk boundaries, over all boundaries of all episodes."""
    n = len(records)
    wins = sum(1 for r in records if r["success"])
    lo, hi = wilson_interval(wins, n)
    times = [r["task_time_s"] for r in records if r["success"] and r["task_time_s"] is not None]
    jerks = [r["jerk"] for r in records if r.get("jerk") is not None]
    total_jump = sum((r["chunk_discontinuity"] or 0.0) * r["boundaries"] for r in records)
    boundaries = sum(r["boundaries"] for r in records)
    return {
        "episodes": n,
        "successes": wins,
        "success_rate": wins / n if n else 0.0,
        "success_ci95": [lo, hi],
        "task_time_s": mean_std(times),
        "jerk": float(np.mean(jerks)) if jerks else None,
        "chunk_discontinuity": total_jump / boundaries if boundaries else None,
        "errors": sum(1 for r in records if r.get("error")),
    }
