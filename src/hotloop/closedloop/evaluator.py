"""The closed-loop episode: simulated time advances while the policy thinks.

The episode runs `hotloop.realtime`'s chunk scheduler and control loop, the same code a robot runs,
on the physics clock (ticks of `physics_dt`): the engine calls the policy on the observation of the
tick its inference starts and releases the chunk `latency` later in simulated time; the plant steps
physics under the commanded target. Only one inference is in flight at a time (one accelerator). The
real inference time is measured every call; the latency model decides whether that is the simulated
delay (`measured`) or something else (`fixed:MS`, a replayed bench distribution).

Latency is rounded up to whole physics ticks (2 ms on the gantry tasks), not to control periods, so a
50 ms delay is 50 ms there. A gymnasium env's tick is its whole step (100 ms at 10 Hz), which cannot be
cut: a chunk takes effect at a step, so `fixed:50` runs as 100 ms. Each record keeps both the latency
asked for (`latency_ms`) and the one simulated (`simulated_latency_ms`); `latency_summary` puts them
side by side for a run, with a note when they differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hotloop.closedloop.latency import LatencyModel
from hotloop.closedloop.metrics import mean_std, rms_jerk, wilson_interval
from hotloop.errors import NonFiniteOutputError
from hotloop.finite import non_finite_output
from hotloop.policy import seed_noise
from hotloop.realtime.clock import SimClock
from hotloop.realtime.runner import SimulatedEngine, run_loop
from hotloop.realtime.scheduler import FALLBACK_CHUNK, ChunkScheduler, SchedulerConfig, Segment
from hotloop.realtime.strategies import Strategy
from hotloop.sim.tasks.protocol import check_observation, start_digest

SAMPLE_TICKS = 5  # the end effector is sampled every 5 ticks (10 ms) for the jerk metric


@dataclass
class SimPlant:
    """The MuJoCo task behind the runner's `Plant` protocol; samples the end effector for jerk."""

    env: Any
    ee: list[np.ndarray] = field(default_factory=list)  # [None, ...] for a task that tracks no position
    sample: int = SAMPLE_TICKS  # ticks between samples (gym: tasks, whose tick is a whole step: 1)
    success: bool = False
    failed: bool = False
    frame_ticks: int = 0  # > 0: a camera frame every this many ticks goes to `on_frame` (rendered)
    on_frame: Callable[[dict[str, Any]], None] | None = None
    render: bool = True  # False: the policy reads no image (a state-only expert), so none is rendered
    _action: np.ndarray | None = None

    def observe(self) -> dict[str, Any]:
        obs = dict(self.env.observe()) if self.render else dict(self.env.observe(render=False))
        return check_observation(obs, getattr(self.env, "task_name", "the task"), self.env.tick)

    def frame(self) -> dict[str, Any]:
        """A rendered observation whatever the policy reads (a camera-rate perception layer's frame)."""
        return check_observation(
            dict(self.env.observe()), getattr(self.env, "task_name", "the task"), self.env.tick
        )

    def hold_action(self) -> np.ndarray:
        return np.asarray(self.env.hold_action())

    def command(self, action: np.ndarray) -> None:
        self._action = np.asarray(action)

    def run_until(self, tick: int) -> bool:
        assert self._action is not None
        env = self.env
        while env.tick < tick:
            # Sample on one 10 ms grid whatever the segment boundaries (jerk needs a uniform step).
            step = min(self.sample - env.tick % self.sample, tick - env.tick)
            if self.frame_ticks:
                step = min(step, self.frame_ticks - env.tick % self.frame_ticks)
            self.success, self.failed = env.advance(self._action, step)
            if env.tick % self.sample == 0:
                self.ee.append(env.ee_pos())
            if self.frame_ticks and env.tick % self.frame_ticks == 0 and self.on_frame is not None:
                self.on_frame(self.frame())  # the camera runs whatever the policy is doing
            if self.success or self.failed or env.timed_out:
                return True  # timed out: the task's own end (a gym env's truncation) comes first
        return False


def run_episode(
    env: Any,
    policy: Any,
    make_strategy: Callable[[int], Strategy],
    latency: LatencyModel,
    seed: int,
    *,
    trace: bool = False,
    config: SchedulerConfig | None = None,
    fallback_policy: Any = None,
    frame_ticks: int = 0,
    on_frame: Callable[[dict[str, Any]], None] | None = None,
    render: bool = True,
) -> dict[str, Any]:
    """Run one episode; returns its record (see `summarize` for the fields). `trace=True` adds
    `trace`: one (start_tick, end_tick, chunk_id, action_index) per executed segment, index -1 = hold,
    `inference_ticks`: one (obs_tick, ready_tick) per inference, and `actions_by_tick` (one commanded
    action per physics tick). `config` sets blending and the watchdog (defaults: latest-only, hold).
    `on_frame`: called with a rendered observation every `frame_ticks` ticks from tick 0 (a camera-rate
    perception layer, see perception/pipeline.py). `render=False`: the policy reads no image, so the
    observations it gets are not rendered (`hotloop.closedloop.adapter.reads_images`).
    A non-finite observation raises `TaskFault` (the episode is an error, not a failure); a non-finite
    action from `policy` raises `NonFiniteOutputError` (the run stops: every episode would hold the robot
    while the policy is asked again and again, and no success figure describes a broken model)."""
    obs, _ = env.reset(seed=seed)
    check_observation(obs, getattr(env, "task_name", "the task"), 0)
    policy.reset()
    seed_noise(policy, seed)  # each episode its own noise stream (hotloop.policy)
    if fallback_policy is not None:
        fallback_policy.reset()
        seed_noise(fallback_policy, seed)
    rng = np.random.default_rng([seed, 0x1A7])  # latency draws: repeatable per episode seed
    dt = env.config.physics_dt
    max_ticks = round(env.config.time_limit_s / dt)
    scheduler = ChunkScheduler(
        make_strategy,
        env.config.ticks_per_control,
        dt,
        action_dim=env.action_space.shape[0],
        config=config,
        fallback_policy=fallback_policy,
        action_bounds=(np.asarray(env.action_space.low), np.asarray(env.action_space.high)),
    )
    from hotloop.closedloop.latency import charges_work

    engine = SimulatedEngine(
        policy,
        dt,
        lambda real_ms: latency.sample_ms(real_ms, rng),
        check_output=_refuse_non_finite(dt),
        scale_by_work=charges_work(latency),
    )
    plant = SimPlant(
        env,
        [env.ee_pos()],
        sample=min(SAMPLE_TICKS, env.config.ticks_per_control),
        frame_ticks=frame_ticks if on_frame is not None else 0,
        on_frame=on_frame,
        render=render,
    )
    start = start_digest(obs)
    if plant.frame_ticks and on_frame is not None:
        on_frame(plant.frame())  # the frame at tick 0
    segments: list[tuple[int, int, int, int]] = []
    by_tick: list[np.ndarray] = []
    engine_ticks = 0  # ticks commanded from the fallback engine's chunks

    def on_segment(seg: Segment, start: int, end: int) -> None:
        nonlocal engine_ticks
        if end > start:
            if seg.chunk == FALLBACK_CHUNK:
                engine_ticks += end - start
            segments.append((start, end, seg.chunk, seg.index))
            if trace:
                by_tick.extend([np.asarray(seg.action, dtype=np.float64)] * (end - start))

    run_loop(scheduler, SimClock(env), engine, plant, max_ticks, on_segment)
    success, failed = plant.success, plant.failed
    latencies, measured, jumps = engine.latencies_ms, engine.measured_ms, scheduler.jumps
    simulated = engine.simulated_ms
    record: dict[str, Any] = {
        "seed": seed,
        "start": start,
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
        "simulated_latency_ms": {
            "mean": float(np.mean(simulated)) if simulated else 0.0,
            "max": float(np.max(simulated)) if simulated else 0.0,
        },
        # The wall time of the calls on this machine (every one, for the run's percentiles): the one part of
        # a record that differs between two runs of the same episode.
        "infer_wall_ms": {
            "mean": float(np.mean(measured)) if measured else 0.0,
            "per_inference": [round(float(x), 3) for x in measured],
        },
        # Every inference's simulated latency (whole ticks), and for a `--strategy draft` run which path
        # each took.
        "per_inference": per_inference(simulated, engine.draft_calls),
        "jerk": None if plant.ee[0] is None else rms_jerk(np.asarray(plant.ee), plant.sample * dt),
        "chunk_discontinuity": float(np.mean(jumps)) if jumps else None,
        "boundaries": len(jumps),
        "watchdog": scheduler.watchdog.counters(env.tick),
        "fallback_engine_ticks": engine_ticks,
        "info": env.info(),
        "error": None,
    }
    draft_calls = [c for c in engine.draft_calls if c is not None]
    if draft_calls:
        from hotloop.realtime.draft import summarize_calls

        record["draft"] = summarize_calls(draft_calls)
    report = getattr(env, "success_report", None)  # a gymnasium env: did it say success where we read it?
    if report is not None:
        record["success_report"] = report()
    if trace:
        record["trace"] = segments
        record["inference_ticks"] = list(engine.inference_ticks)
        record["actions_by_tick"] = np.asarray(by_tick)
        record["events"] = list(scheduler.watchdog.events)
    return record


def per_inference(simulated: list[float], draft_calls: list[dict[str, Any] | None]) -> dict[str, Any]:
    """An episode's inferences one by one: the simulated latency (ms, whole ticks), and with `--strategy
    draft` each call's path ("speculative": the checked rows were the answer; "full": the denoising loop
    ran; None: a call with no draft, the episode's first). Their wall times are `infer_wall_ms`'s."""
    out: dict[str, Any] = {"simulated_ms": [round(float(x), 3) for x in simulated]}
    if any(c is not None for c in draft_calls):
        out["path"] = [
            None if c is None else ("speculative" if c.get("speculative") else "full") for c in draft_calls
        ]
    return out


def latency_percentiles(values: list[float]) -> dict[str, float | None]:
    """mean, p50, p99 and max of per-inference latencies (None for each when there are none)."""
    if not values:
        return {"mean": None, "p50": None, "p99": None, "max": None}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(arr.mean()),
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
    }


def inference_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-inference latency over a run's completed episodes: the simulated latency (what the robot
    waited) and the wall time of the calls on this machine, each as mean, p50, p99 and max; with
    `--strategy draft` also split by the path each call took. Records that predate `per_inference`
    add nothing."""
    simulated: list[float] = []
    wall: list[float] = []
    by_path: dict[str, tuple[list[float], list[float]]] = {}
    for r in records:
        p = r.get("per_inference")
        if r.get("error") or not isinstance(p, dict):
            continue
        sim = list(p.get("simulated_ms") or [])
        w = list((r.get("infer_wall_ms") or {}).get("per_inference") or [])
        simulated += sim
        wall += w
        for i, path in enumerate(p.get("path") or []):
            if path is not None and i < len(sim) and i < len(w):
                pair = by_path.setdefault(str(path), ([], []))
                pair[0].append(sim[i])
                pair[1].append(w[i])
    out: dict[str, Any] = {
        "inferences": len(simulated),
        "simulated_ms": latency_percentiles(simulated),
        "wall_ms": latency_percentiles(wall),
    }
    if by_path:
        out["by_path"] = {
            path: {
                "inferences": len(sim),
                "simulated_ms": latency_percentiles(sim),
                "wall_ms": latency_percentiles(w),
            }
            for path, (sim, w) in sorted(by_path.items())
        }
    return out


def draft_summary(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Acceptance over a run's draft calls (`hotloop.realtime.draft.summarize_calls`, summed over its
    completed episodes), or None for a run without any."""
    from hotloop.realtime.draft import merged_source, source_of

    per = [r["draft"] for r in records if not r.get("error") and isinstance(r.get("draft"), dict)]
    if not per:
        return None
    calls = sum(int(d.get("calls") or 0) for d in per)
    spec = sum(int(d.get("speculative_calls") or 0) for d in per)
    rows = sum(int(d.get("rows_verified") or 0) for d in per)
    accepted = sum(int(d.get("rows_accepted") or 0) for d in per)
    work = sum(float(d.get("mean_work") or 0.0) * int(d.get("calls") or 0) for d in per)
    return {
        "source": merged_source(source_of(d) for d in per),  # "student" with --draft-from
        "calls": calls,
        "speculative_calls": spec,
        "full_calls": calls - spec,
        "call_acceptance": spec / calls if calls else None,
        "rows_verified": rows,
        "rows_accepted": accepted,
        "row_acceptance": accepted / rows if rows else None,
        "mean_accepted": accepted / calls if calls else None,
        "mean_work": work / calls if calls else None,
    }


def independent_trials(records: list[dict[str, Any]]) -> int:
    """How many of `records` are independent trials: their distinct start states (a record without a
    start digest, from a file that predates it, counts as one of its own)."""
    starts = [r.get("start") for r in records]
    return len({s for s in starts if s}) + sum(1 for s in starts if not s)


def _refuse_non_finite(dt: float) -> Callable[[Any, int], None]:
    def check(output: Any, tick: int) -> None:
        where = non_finite_output(output.get("actions") if isinstance(output, dict) else output, "actions")
        if where is not None:
            raise NonFiniteOutputError(
                f"the policy answered non-finite actions (NaN or inf; {where}) at {tick * dt:.3f} s of the "
                "episode; its weights or its inputs overflow: check it with `hotloop verify`"
            )

    return check


def duplicate_starts(records: list[dict[str, Any]]) -> int:
    """Episodes whose start state an earlier episode already had (an env with a finite set of
    configurations): they are not independent trials."""
    starts = [r["start"] for r in records if r.get("start")]
    return len(starts) - len(set(starts))


def failed_record(seed: int, error: str) -> dict[str, Any]:
    """A crashed episode (it raised, or its worker died): an error, never a policy failure. It is kept
    (with its seed and the error) and counted in `errors`, apart from successes and failures."""
    return {
        "seed": seed,
        "success": False,
        "failed": False,
        "timed_out": False,
        "task_time_s": None,
        "sim_time_s": None,
        "inferences": 0,
        "latency_ms": {"mean": None, "max": None},
        "simulated_latency_ms": {"mean": None, "max": None},
        "infer_wall_ms": {"mean": None},
        "jerk": None,
        "chunk_discontinuity": None,
        "boundaries": 0,
        "info": {},
        "error": error,
    }


# A simulated latency this much above the one asked for (both conditions) gets a note. Below 5 ms the
# rounding is a few percent of a 100 ms control period: the gantry's 2 ms tick adds at most 2 ms (1 ms
# to a measured 22 ms inference on average), shown in the tables but not worth a line every run.
NOTE_ABOVE_MS = 5.0
NOTE_ABOVE_FRACTION = 0.05


def latency_summary(records: list[dict[str, Any]], spec: str, step_ms: float | None) -> dict[str, Any]:
    """The latency a run asked for and the one it simulated, over every inference of its completed
    episodes (records that predate `simulated_latency_ms` give None), the task's tick (`step_ms`), and a
    note when the simulated one is materially longer (`NOTE_ABOVE_MS` and `NOTE_ABOVE_FRACTION`)."""
    asked = simulated = 0.0
    count = 0
    most: float | None = None
    for r in records:
        n = int(r.get("inferences") or 0)
        sim = r.get("simulated_latency_ms") or {}
        req = r.get("latency_ms") or {}
        if r.get("error") or not n or sim.get("mean") is None or req.get("mean") is None:
            continue
        asked += float(req["mean"]) * n
        simulated += float(sim["mean"]) * n
        count += n
        most = max(most or 0.0, float(sim["max"]))
    if not count:
        return {"requested_ms": None, "simulated_ms": None, "simulated_max_ms": None, "step_ms": step_ms,
                "note": None}  # fmt: skip
    asked, simulated = asked / count, simulated / count
    note = None
    if simulated - asked > NOTE_ABOVE_MS and simulated - asked > NOTE_ABOVE_FRACTION * asked:
        tick = f"{step_ms:g} ms" if step_ms is not None else "whole"
        note = (
            f"{spec} ({asked:.3g} ms per inference) ran as {simulated:.3g} ms: the task advances in {tick} "
            "steps and a chunk takes effect at a step, so each latency is rounded up to a whole step"
        )
    return {"requested_ms": asked, "simulated_ms": simulated, "simulated_max_ms": most, "step_ms": step_ms,
            "note": note}  # fmt: skip


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate episode records.

    `episodes` counts every record; `errors` the crashed ones (see `failed_record`); `completed` the
    rest, which either succeeded or `failures`. The success rate and its Wilson 95% interval are over
    completed episodes: a crash says nothing about the policy, so it is neither a success nor a failure.
    Task time is over successes; jerk = mean of per-episode RMS jerk (m/s^3); chunk_discontinuity =
    mean jump (m) of the commanded position at chunk boundaries, over all boundaries of all episodes;
    chunk_jump_per_s = those jumps summed, per second of episode time (m/s): the per-boundary mean
    alone flatters a strategy that replans often (more, smaller jumps), this one does not.
    `duplicate_starts`: completed episodes that began in the start state of an earlier one. They are
    not independent trials, so the interval counts the distinct starts (`ci_trials`, = `completed` when
    every start differs): the Wilson interval of the same rate over that many trials.
    """
    crashed = [r for r in records if r.get("error")]
    ran = [r for r in records if not r.get("error")]
    n = len(ran)
    wins = sum(1 for r in ran if r["success"])
    trials = independent_trials(ran)
    # Repeats of a start are not new evidence: the interval is the rate's over the distinct starts.
    lo, hi = wilson_interval(wins * trials / n if n else 0, trials)
    times = [r["task_time_s"] for r in ran if r["success"] and r["task_time_s"] is not None]
    jerks = [r["jerk"] for r in ran if r.get("jerk") is not None]
    total_jump = sum((r["chunk_discontinuity"] or 0.0) * r["boundaries"] for r in ran)
    boundaries = sum(r["boundaries"] for r in ran)
    seconds = sum(r.get("sim_time_s") or 0.0 for r in ran)
    extra: dict[str, Any] = {}
    draft = draft_summary(ran)
    if draft is not None:
        extra["draft"] = draft
    return {
        "episodes": len(records),
        "completed": n,
        "successes": wins,
        "failures": n - wins,
        "errors": len(crashed),
        "error_seeds": [r["seed"] for r in crashed],
        "duplicate_starts": duplicate_starts(ran),
        "success_rate": wins / n if n else 0.0,
        "success_ci95": [lo, hi],
        "ci_trials": trials,
        "task_time_s": mean_std(times),
        "jerk": float(np.mean(jerks)) if jerks else None,
        "chunk_discontinuity": total_jump / boundaries if boundaries else None,
        "chunk_jump_per_s": total_jump / seconds if boundaries and seconds > 0 else None,
        "inference": inference_summary(ran),
        **extra,
    }
