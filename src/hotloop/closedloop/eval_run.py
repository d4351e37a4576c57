"""One evaluation point (target × task × strategy × latency over N seeded episodes) and its report.

Result JSON (one point; `hotloop eval --json` writes this object, or `{"runs": [...]}` for several
strategies or a latency sweep)::

    {"target", "task", "difficulty", "strategy": {name, ...}, "latency": {kind, spec, ...},
     "episodes", "successes", "success_rate", "success_ci95": [lo, hi] (over "ci_trials": the distinct
     start states; repeats of a start are not independent trials), "duplicate_starts",
     "task_time_s": {"mean", "std"}  (successful episodes only),
     "length_unit" (the task's position unit: "m", "px", or null when its actions are not positions),
     "jerk" (length_unit/s^3, mean of per-episode RMS), "chunk_discontinuity" (length_unit, mean jump
     at chunk boundaries), "adaptation" (how the policy was fitted to the task: views, state, actions),
     "completed", "failures" (completed episodes that did not succeed), "errors" and "error_seeds"
     (episodes that raised or whose worker died: neither successes nor failures, and the success rate is
     over completed episodes), "interrupted", "wall_s", "seeds" (those that ran, each with a record),
     "simulated_latency": {"requested_ms", "simulated_ms", "simulated_max_ms", "step_ms", "note"} (the
     latency asked for and the one simulated, in whole task steps, per inference; `note` when they differ),
     "inference": {"inferences", "simulated_ms": {mean, p50, p99, max} (per inference, what the robot
     waited), "wall_ms": {...} (the calls' wall time on this machine), and with --strategy draft
     "by_path": {"speculative" | "full": {...}}}, "draft" (--strategy draft only: "calls",
     "speculative_calls", "full_calls", "call_acceptance", "rows_verified", "rows_accepted",
     "row_acceptance", "mean_accepted", "mean_work", "source": "shifted" | "student" (--draft-from);
     `hotloop.realtime.draft`),
     "per_episode": [...], "env": {machine fingerprint}}
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from hotloop.closedloop.pool import run_episodes
from hotloop.closedloop.workers import EpisodeJob
from hotloop.errors import ConfigError

MAX_EPISODES = 1_000_000  # per point: days of simulation; beyond that, a typo
WORKERS_PER_CPU = 4


def max_workers() -> int:
    """The most evaluation worker processes worth starting here."""
    import os

    return WORKERS_PER_CPU * len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class EvalRequest:
    target: str
    task: str = "conveyor-pick"
    difficulty: str | None = None
    strategy: str = "sync"
    latency: str = "measured"
    episodes: int = 50
    seed: int = 0
    workers: int = 2
    execute_steps: int | None = None
    trigger_remaining: int | None = None
    num_steps: int | None = None
    policy_factory: str | None = None
    task_kwargs: str | None = None  # JSON object for gym:/plugin tasks (--task-kwargs)
    blend: str = "latest"
    fallback: str = "hold"  # hold | continue | stop | engine:TARGET (--fallback)
    deadline_ms: float | None = None
    guidance_weight: float | None = None
    pipeline: str | None = None
    memory_cap_mb: float | None = None  # an artifact engine's resident-memory cap (--memory-cap-mb)
    ensemble_coeff: float | None = None  # --ensemble-coeff (None: the policy's, else 0.01)
    draft_tolerance: float | None = None  # --draft-tolerance (None: hotloop.realtime.draft's default)
    draft_from: str | None = None  # --draft-from: the onestep student proposing draft's drafts (draft only)
    perturb: str | None = None  # --perturb NAME:VALUE,... (hotloop.sim.perturb)
    fit_state: bool = False  # --fit-state (hotloop.closedloop.adapter.plan)

    def __post_init__(self) -> None:
        # Impossible values fail here, before any episode runs (named by their `hotloop eval` flags), the
        # high ones too: a typo's extra zeros must not first spend seconds loading the policy, or start
        # hundreds of worker processes that each load it.
        from hotloop.targets import MAX_SEED, OPTION_LIMITS

        for flag, value, low in (
            ("--episodes", self.episodes, 1),
            ("--seed", self.seed, 0),
            ("--workers", self.workers, 0),
        ):
            if value is not None and value < low:
                raise ConfigError(f"{flag} must be >= {low} (got {value})")
        if self.episodes > MAX_EPISODES:
            raise ConfigError(f"--episodes must be from 1 to {MAX_EPISODES:,} (got {self.episodes:,})")
        most = max_workers()
        if self.workers > most:
            raise ConfigError(
                f"--workers must be from 0 to {most} (got {self.workers}): {WORKERS_PER_CPU} per CPU this "
                "process may use; more only take turns, each holding its own copy of the policy"
            )
        steps = OPTION_LIMITS["num_steps"]  # what the target would refuse once loaded, said now
        if self.num_steps is not None and not 1 <= self.num_steps <= steps:
            raise ConfigError(f"--steps must be an integer from 1 to {steps} (got {self.num_steps})")
        # A --policy-factory policy declares nothing before it is built.
        target = self.target if self.policy_factory is None else None
        check_chunk_options(target, self.execute_steps, self.trigger_remaining)
        if self.memory_cap_mb is not None:
            from hotloop.runtime.memory import check_cap

            check_cap(self.memory_cap_mb)
        if self.seed + self.episodes - 1 > MAX_SEED:
            raise ConfigError(
                f"--seed {self.seed} with --episodes {self.episodes} passes {MAX_SEED}, the largest seed"
            )


def check_chunk_options(
    target: str | None,
    execute_steps: int | None,
    trigger_remaining: int | None,
    trigger_flag: str = "--trigger-remaining",
) -> None:
    """--execute-steps in [1, H], --trigger-remaining in [0, H - 1] for a policy of chunk length H:
    checked before the policy loads where the target declares H (`TargetEntry.horizon`); otherwise the
    lower bounds here and the upper ones at the policy's first chunk. `target` None: a policy that
    declares nothing before it is built."""
    from hotloop.errors import HotloopError
    from hotloop.targets import find_target

    horizon = None
    if target is not None and (execute_steps is not None or trigger_remaining is not None):
        try:
            horizon = find_target(target).declared_horizon(target)
        except HotloopError:
            horizon = None  # an unknown target is named by the checks that need it
    for flag, value, low, high in (
        ("--execute-steps", execute_steps, 1, horizon),
        (trigger_flag, trigger_remaining, 0, None if horizon is None else horizon - 1),
    ):
        if value is None:
            continue
        if high is not None and not low <= value <= high:
            held = f"{horizon} action{'s' if horizon != 1 else ''}"
            raise ConfigError(
                f"{flag} must be in [{low}, {high}] (got {value}): {target}'s chunks hold {held}"
            )
        if value < low:
            top = "its chunk length" if low == 1 else "its chunk length - 1"
            whose = f"{target}'s" if target else "the"
            raise ConfigError(f"{flag} must be from {low} to {top} for {whose} policy (got {value})")


def same_named(source: Any, target: type, leave: tuple[str, ...] = ()) -> dict[str, Any]:
    """`source`'s values of the fields that dataclass `target` shares with it by name, but those in `leave`:
    the options one stage of an eval hands the next as they are."""
    names = {f.name for f in fields(source)} - set(leave)
    return {f.name: getattr(source, f.name) for f in fields(target) if f.name in names}


def job_for(request: EvalRequest, threads: int | None) -> EpisodeJob:
    """The worker's job for `request`: its options as they are but the fallback, parsed (the seed of each
    episode is passed apart, per episode)."""
    from hotloop.realtime.watchdog import parse_fallback

    fallback, fallback_target = parse_fallback(request.fallback)
    options = same_named(request, EpisodeJob, leave=("seed", "fallback"))
    return EpisodeJob(**options, threads=threads, fallback=fallback, fallback_target=fallback_target)


def resolved_difficulty(task: str, difficulty: str | None) -> str | None:
    """The difficulty an episode really runs at: the one asked for, or the task's default."""
    if difficulty is not None:
        return difficulty
    import importlib

    from hotloop.sim.tasks import default_tasks

    registry = default_tasks()
    if task not in registry:  # a task from elsewhere (a gymnasium env, a plugin): no difficulty levels
        return None
    entry = registry.get(task)
    if not entry.difficulties:
        return None
    module, attr = entry.config.split(":")
    return getattr(getattr(importlib.import_module(module), attr)(), "difficulty", None)


def run_eval(
    request: EvalRequest,
    progress: bool = True,
    pool: Any = None,
    on_timing: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """One point. `pool`: a `hotloop.closedloop.pool.WorkerPool` of `request.workers` workers to run it on
    (kept up for the next point); None: one started and stopped for this point. `on_timing`: each
    episode's timing, as `hotloop.closedloop.pool` describes it."""
    from hotloop.closedloop.latency import parse_latency
    from hotloop.progress import Progress

    latency = parse_latency(request.latency)
    threads = 1 if request.workers >= 1 else None  # one core per worker; 2 workers fill 2 cores
    job = job_for(request, threads)
    job.scheduler_config()  # bad --blend / --fallback / --deadline-ms: fail before any episode
    seeds = [request.seed + i for i in range(request.episodes)]
    k = "" if request.trigger_remaining is None else f" k={request.trigger_remaining}"
    bar = Progress(len(seeds), f"{request.strategy}{k} {latency.spec}", "ep", enabled=progress)
    wins = crashes = 0

    notes: set[str] = set()

    def on_result(record: dict[str, Any]) -> None:
        nonlocal wins, crashes
        note = (record.get("run") or {}).get("profile_note")
        if note and note not in notes:  # every worker's task says it; the run says it once
            notes.add(note)
            bar.write(note)
        wins += int(record["success"])
        crashes += int(bool(record.get("error")))
        bar.update(1, f"success {wins}/{bar.n + 1 - crashes}" + (f", {crashes} crashed" if crashes else ""))

    t0 = time.perf_counter()
    with bar:
        records, interrupted = run_episodes(job, seeds, request.workers, on_result, on_timing, pool=pool)
    return assemble_run(request, records, interrupted, time.perf_counter() - t0, threads)


def assemble_run(
    request: EvalRequest,
    records: list[dict[str, Any]],
    interrupted: bool,
    wall_s: float,
    threads: int | None,
    env: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One point's result from its episode records (in seed order), wherever they ran: the local pool,
    a Ray cluster, or a sweep's results store read back (`env`: the machine, when not this one)."""
    from hotloop.closedloop.evaluator import latency_summary, summarize
    from hotloop.closedloop.latency import parse_latency
    from hotloop.measure.fingerprint import machine_fingerprint
    from hotloop.realtime.strategies import make_strategy
    from hotloop.sim.tasks.gym_task import success_note

    latency = parse_latency(request.latency)
    job = job_for(request, threads)
    described = [r.pop("run") for r in records if "run" in r]  # the same from every episode that ran
    run_info = described[0] if described else {"adaptation": None, "length_unit": None}
    # The strategy as it ran (the policy's horizon and declared defaults), or with a placeholder horizon
    # when no episode got a chunk.
    try:
        strategy_info = dict(run_info.get("strategy") or {})
        if not strategy_info:
            strategy_info = make_strategy(request.strategy, job.strategy_config(16)).describe()
        strategy_info.update(blend=request.blend, fallback=request.fallback, deadline_ms=request.deadline_ms)
    except Exception:  # noqa: BLE001 - description only
        strategy_info = {"name": request.strategy}
    extra: dict[str, Any] = {}
    if request.pipeline:
        from hotloop.perception.pipeline import parse_pipeline, summarize_pipeline

        extra["pipeline"] = summarize_pipeline(records, parse_pipeline(request.pipeline))
    if request.perturb:
        from hotloop.sim.perturb import parse_perturb

        extra["perturbation"] = {p.name: p.value for p in parse_perturb(request.perturb)}
    return {
        "target": request.target,
        "task": request.task,
        "difficulty": resolved_difficulty(request.task, request.difficulty),
        "strategy": strategy_info,
        "latency": latency.describe(),
        "simulated_latency": latency_summary(records, latency.spec, run_info.get("step_ms")),
        "adaptation": run_info["adaptation"],
        "length_unit": run_info["length_unit"],
        **summarize(records),
        "success_note": success_note(records, request.task),
        **extra,
        "interrupted": interrupted,
        "wall_s": round(wall_s, 2),
        "seeds": [r["seed"] for r in records],  # interrupted: only those that ran
        "request": asdict(request),
        "per_episode": records,
        "env": env if env is not None else machine_fingerprint(threads),
    }


def run_label(run: dict[str, Any]) -> str:
    """A run's strategy as tables and plots name it: with its trigger (`k=...`) when one was asked for, so
    that the points of a `--sweep-trigger` stay apart."""
    name = str(run["strategy"]["name"])
    if run["strategy"].get("draft_source") == "student":  # --draft-from: beside plain draft in one table
        name = f"{name} (student)"
    k = (run.get("request") or {}).get("trigger_remaining")
    perturb = (run.get("request") or {}).get("perturb")
    name = name if k is None else f"{name} k={k}"
    return name if not perturb else f"{name} ({perturb})"


def simulated_ms(run: dict[str, Any]) -> float | None:
    """The latency a run simulated, mean per inference (None when nothing ran, or from an older file)."""
    value = (run.get("simulated_latency") or {}).get("simulated_ms")
    return None if value is None else float(value)


def _latency_ms(run: dict[str, Any]) -> float | None:
    """Where a run sits on the latency axis: the latency it simulated, else the one it asked for."""
    simulated = simulated_ms(run)
    if simulated is not None:
        return simulated
    lat = run["latency"]
    if lat["kind"] == "fixed":
        return float(lat["ms"])
    means = [r["latency_ms"]["mean"] for r in run["per_episode"] if r["latency_ms"]["mean"] is not None]
    return sum(means) / len(means) if means else None


def _with_unit(value: float, unit: str | None, per: str = "") -> str:
    """A length (per=""), a length per second (per="/s") or jerk (per="/s³") in the task's unit: metres
    shown in mm (mm/s), other units as they are, and with no known unit the env's own action units, said
    rather than guessed."""
    if unit == "m":
        if per == "/s":  # a rate of jumps: mm per second reads like the jumps themselves
            return f"{1000 * value:.1f} mm/s"
        return f"{1000 * value:.1f} mm" if not per else f"{value:.0f} m{per}"
    return f"{value:.3g} {unit if unit is not None else 'action units'}{per}"


def _simulated_cell(run: dict[str, Any]) -> str:
    """The latency the run simulated (mean per inference), marked when it is not what was asked."""
    value = simulated_ms(run)
    if value is None:
        return "-"
    text = f"{value:.3g} ms"
    return f"[yellow]{text}[/yellow]" if (run.get("simulated_latency") or {}).get("note") else text


def _inference_cell(run: dict[str, Any]) -> str:
    """The simulated latency per inference, mean / p99 (what the robot waited for each chunk)."""
    lat = ((run.get("inference") or {}).get("simulated_ms")) or {}
    if lat.get("mean") is None:
        return "-"
    return f"{lat['mean']:.0f} / {lat['p99']:.0f}"


def _draft_cell(run: dict[str, Any]) -> str:
    """A `--strategy draft` run's acceptance: the calls answered by the checked draft, the rows accepted."""
    d = run.get("draft")
    if not d or not d.get("calls"):
        return "-"
    return f"{100 * d['call_acceptance']:.0f}% / {100 * d['row_acceptance']:.0f}%"


def print_table(runs: list[dict[str, Any]], title: str = "closed-loop evaluation") -> None:
    """The results table, on stdout (it is the command's output; progress and errors go to stderr).
    Success counts are over completed episodes; crashed ones are in their own column."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in (
        "strategy",
        "latency",
        "simulated",
        "success",
        "95% CI",
        "errors",
        "task time s",
        "jerk",
        "chunk jump",
        "jump / s",
        "infer ms mean / p99",
        "wall s",
    ):
        table.add_column(col, no_wrap=True)
    if any(r.get("draft") for r in runs):
        table.add_column("draft accepted: calls / rows", no_wrap=True)
    for r in runs:
        tt = r["task_time_s"]
        lo, hi = r["success_ci95"]
        table.add_row(
            run_label(r),
            r["latency"]["spec"],
            _simulated_cell(r),
            f"{r['successes']}/{r['completed']} ({100 * r['success_rate']:.0f}%)" if r["completed"] else "-",
            f"{100 * lo:.0f}–{100 * hi:.0f}%" if r["completed"] else "-",
            f"[red]{r['errors']}[/red]" if r["errors"] else "0",
            "-" if tt["mean"] is None else f"{tt['mean']:.2f} ± {tt['std']:.2f}",
            "-" if r["jerk"] is None else _with_unit(r["jerk"], r.get("length_unit"), "/s³"),
            "-"
            if r["chunk_discontinuity"] is None
            else _with_unit(r["chunk_discontinuity"], r.get("length_unit")),
            "-"
            if r.get("chunk_jump_per_s") is None
            else _with_unit(r["chunk_jump_per_s"], r.get("length_unit"), "/s"),
            _inference_cell(r),
            f"{r['wall_s']:.0f}",
            *([_draft_cell(r)] if any(x.get("draft") for x in runs) else []),
        )
    wide = 160 + (30 if any(r.get("draft") for r in runs) else 0)  # the columns stay whole in a pipe too
    Console(width=max(wide, Console().width)).print(table)
    # The task's and the policy's, not a run's: each once, wherever the episodes ran (pool or cluster).
    task_notes = [r.get("success_note") for r in runs] + [
        (r.get("adaptation") or {}).get("note") for r in runs
    ]
    for note in dict.fromkeys(n for n in task_notes if n):
        print(f"note: {note}", file=sys.stderr)
    for r in runs:
        note = (r.get("simulated_latency") or {}).get("note")
        if note:  # the latency column says what was asked; this says it is not what ran
            print(f"note: {run_label(r)}: {note}", file=sys.stderr)
        if r.get("duplicate_starts"):  # an env with a finite set of starts: fewer independent trials
            print(
                f"note: {r['duplicate_starts']} of {r['completed']} episodes ({run_label(r)}, "
                f"{r['latency']['spec']}) began in the start state of an earlier episode; they are repeats, "
                f"not independent trials: the 95% interval counts the {r.get('ci_trials')} distinct starts",
                file=sys.stderr,
            )


def plot_sweep(runs: list[dict[str, Any]], path: str | Path, title: str | None = None) -> Path:
    """Success rate (with Wilson 95% bars) against latency, one line per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hotloop.io import atomic_write_figure

    fig, ax = plt.subplots(figsize=(6, 4))
    by: dict[str, list[tuple[float, float, float, float]]] = {}
    for r in runs:
        ms = _latency_ms(r)
        if ms is None:
            continue
        lo, hi = r["success_ci95"]
        by.setdefault(run_label(r), []).append((ms, r["success_rate"], lo, hi))
    for name, pts in by.items():
        pts.sort()
        xs = [p[0] for p in pts]
        ys = [100 * p[1] for p in pts]
        err = [[100 * max(0.0, p[1] - p[2]) for p in pts], [100 * max(0.0, p[3] - p[1]) for p in pts]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=name)
    first = runs[0]
    ax.set_xlabel("inference latency (ms, simulated)")
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(-2, 102)
    ax.set_title(title or f"{first['target']} on {first['task']} ({first['episodes']} episodes per point)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()

    return atomic_write_figure(path, fig, dpi=100)
