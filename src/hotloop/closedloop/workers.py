"""Run evaluation episodes in worker processes, surviving crashes and Ctrl-C.

Each worker builds its environment and policy once, then runs the episode seeds it is handed one at a
time over a pipe. The parent waits on every pipe and every process sentinel at once, so a worker that
dies (a segfault in a native library, an out-of-memory kill) is noticed at once: its episode is recorded
as an error (not a policy failure) with its seed and the error, and a fresh worker takes over the
remaining seeds. A Python exception inside an episode is an error episode too (the worker survives). Ctrl-C stops the workers and
returns what finished, flagged `interrupted`; further Ctrl-C presses while the workers stop are noted,
not raised (`hotloop.interrupts`), so the finished episodes always come back.

Workers ignore SIGINT (the terminal sends it to the whole process group); only the parent decides.
`workers=0` runs everything in this process (for debugging and tests).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from hotloop.errors import ConfigError, HotloopError, MemoryCapError

# A record's key for where and how long it ran ({"pid", "episode_s", "build_s"}), set by the worker and
# taken off by `run_episodes` before anyone else sees the record (`on_timing` gets it).
EXEC_KEY = "_exec"


@dataclass(frozen=True)
class EpisodeJob:
    """Everything a worker needs to build its env, policy, strategy and latency model (picklable)."""

    target: str
    task: str
    difficulty: str | None
    strategy: str
    latency: str
    execute_steps: int | None = None
    trigger_remaining: int | None = None
    num_steps: int | None = None
    policy_factory: str | None = None  # "module:function" -> Policy, instead of the target table
    threads: int | None = None  # torch threads per worker
    seed: int = 0
    task_kwargs: str | None = None  # JSON object of keyword arguments for the task (gym:ENV_ID, plugins)
    blend: str = "latest"
    fallback: str = "hold"
    deadline_ms: float | None = None
    guidance_weight: float | None = None  # rtc's beta (None: the strategy's default)
    ensemble_coeff: float | None = None  # ensemble's coefficient (None: the policy's, else the default)

    def scheduler_config(self) -> Any:
        from hotloop.realtime.blending import BlendConfig
        from hotloop.realtime.scheduler import SchedulerConfig
        from hotloop.realtime.watchdog import WatchdogConfig

        return SchedulerConfig(BlendConfig(self.blend), WatchdogConfig(self.fallback, self.deadline_ms))

    def strategy_config(self, horizon: int, defaults: dict[str, Any] | None = None) -> Any:
        """The strategy's options for a policy of `horizon`; `defaults` (the policy's
        `strategy_defaults`) fill the ones not given (`hotloop.realtime.strategies.apply_defaults`)."""
        from hotloop.realtime.strategies import StrategyConfig, apply_defaults

        extra = {} if self.guidance_weight is None else {"max_guidance_weight": self.guidance_weight}
        config = StrategyConfig(
            horizon, self.execute_steps, self.trigger_remaining, ensemble_coeff=self.ensemble_coeff, **extra
        )
        return apply_defaults(self.strategy, config, defaults)

    pipeline: str | None = None  # conveyor-pick's layered perception chain (perception/pipeline.py)
    memory_cap_mb: float | None = None  # an artifact engine's resident-memory cap (--memory-cap-mb)
    fallback_target: str | None = None  # the smaller engine of the `engine` fallback (a target name)
    perturb: str | None = None  # --perturb NAME:VALUE,... (hotloop.sim.perturb)


class EpisodeRunner:
    """Built once per worker; `run(seed)` plays one episode."""

    def __init__(self, job: EpisodeJob) -> None:
        from hotloop.closedloop.evaluator import run_episode
        from hotloop.closedloop.latency import parse_latency
        from hotloop.realtime.strategies import default_strategies, make_strategy
        from hotloop.sim.tasks import make_task

        strategies = default_strategies()
        strategies.get(job.strategy)  # unknown name: fail before building anything
        # Settings that do not depend on the chunk length (the guidance weight) fail here; the ranges of
        # --execute-steps / --trigger-remaining need the policy's horizon and are checked at its first chunk.
        job.strategy_config(1 + max(job.execute_steps or 1, job.trigger_remaining or 0))
        self.scheduler_config = job.scheduler_config()
        self.latency: Any = parse_latency(job.latency)  # a LatencyModel, or a PipelineLatency around one
        if job.threads is not None:
            import torch

            torch.set_num_threads(job.threads)
        self.env = make_task(job.task, difficulty=job.difficulty, task_kwargs=job.task_kwargs)
        self.policy = build_policy(
            job, self.env
        )  # adapted to the task; a pipeline feeds it task observations
        # What the run reports beside its figures: how the policy was fitted to the task, and the unit of
        # the positions its jump and jerk figures are in.
        adaptation = getattr(self.policy, "adaptation", None)
        # How the policy is meant to be executed (an ACT checkpoint's n_action_steps and ensembling
        # coefficient): the options the command line left unset.
        self.strategy_defaults = dict(getattr(self.policy, "strategy_defaults", None) or {})
        self.describe: dict[str, Any] = {
            "adaptation": adaptation.describe() if adaptation is not None else None,
            "length_unit": self.env.task_spec.length_unit,
            "profile_note": getattr(self.env, "profile_note", None),  # said once, by the driver
        }
        if job.pipeline:
            from hotloop.perception.pipeline import attach_pipeline

            self.policy, self.latency = attach_pipeline(self.policy, self.env, job.pipeline, self.latency)
        if job.perturb:  # after the pipeline: its calibration is the nominal camera's, as a robot's file is
            from hotloop.sim.perturb import attach_perturbations

            self.policy, self.latency = attach_perturbations(self.policy, self.env, job.perturb, self.latency)
        # The `engine` fallback's smaller policy, adapted to the task like the main one. It reads the task's
        # observation directly (with --pipeline too: it must not wait for the chain the main one waits for).
        self.fallback_policy = (
            build_policy(
                dataclasses.replace(  # --memory-cap-mb is the main target's
                    job, target=job.fallback_target, policy_factory=None, num_steps=None, memory_cap_mb=None
                ),
                self.env,
            )
            if job.fallback_target
            else None
        )
        from hotloop.closedloop.adapter import reads_images

        # Render only for a policy that looks (a state-only expert's episodes render nothing).
        self.render = reads_images(self.policy) or (
            self.fallback_policy is not None and reads_images(self.fallback_policy)
        )
        self._run = run_episode

        def strategy_for(horizon: int) -> Any:
            strategy = make_strategy(job.strategy, job.strategy_config(horizon, self.strategy_defaults))
            self.describe["strategy"] = strategy.describe()  # what ran, at the policy's own horizon
            return strategy

        self.strategy_for = strategy_for

    def run(self, seed: int) -> dict[str, Any]:
        from hotloop.closedloop.evaluator import failed_record

        try:
            record = self._run(
                self.env,
                self.policy,
                self.strategy_for,
                self.latency,
                seed,
                config=self.scheduler_config,
                fallback_policy=self.fallback_policy,
                frame_ticks=getattr(self.policy, "frame_ticks", 0),
                on_frame=getattr(self.policy, "on_frame", None),
                render=self.render,
            )
            if hasattr(self.policy, "take_episode"):
                record["pipeline"] = self.policy.take_episode()
            record["run"] = self.describe  # lifted to the run's summary (eval_run), not kept per episode
            return record
        except MemoryCapError as e:  # the engine failed while running: an error episode, work kept
            return failed_record(seed, str(e))
        except HotloopError:
            raise  # bad configuration: every episode would fail the same way
        except Exception as e:  # noqa: BLE001 - a failing episode is a result, not a crash
            return failed_record(seed, _describe(e))


def build_policy(job: EpisodeJob, env: Any) -> Any:
    """The job's policy, seen through the adapter for `env`'s task spec (hotloop.closedloop.adapter)."""
    from hotloop.closedloop.adapter import adapt, request_views
    from hotloop.targets import TargetOptions, find_target

    if job.policy_factory:
        import importlib

        module, attr = job.policy_factory.split(":")
        policy = getattr(importlib.import_module(module), attr)()
    else:
        policy = find_target(job.target).build_policy(
            job.target,
            TargetOptions(
                num_steps=job.num_steps, seed=job.seed, memory_cap_mb=job.memory_cap_mb, threads=job.threads
            ),
        )
    if hasattr(policy, "bind_task"):  # a policy that reads the task itself (expert:scripted)
        policy.bind_task(env)
    request_views(env, policy)  # a view the task renders only on request (the gantry's wrist camera)
    return adapt(policy, env.task_spec, policy_name=job.policy_factory or job.target)


def _worker(conn: Connection, job: EpisodeJob) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    t0 = time.perf_counter()
    try:
        runner = EpisodeRunner(job)
    except HotloopError as e:  # bad input: the parent prints the message as it is
        conn.send(("init_error", str(e), True))
        return
    except BaseException as e:  # noqa: BLE001 - report why the worker cannot start
        conn.send(("init_error", _describe(e), False))
        return
    conn.send(("ready", time.perf_counter() - t0, None))
    while True:
        seed = conn.recv()
        if seed is None:
            return
        try:
            t1 = time.perf_counter()
            record = runner.run(seed)
            # Where and how long, for the sweep's cost summary; the parent takes it off the record.
            record[EXEC_KEY] = {"pid": os.getpid(), "episode_s": time.perf_counter() - t1}
            conn.send(("done", seed, record))
        except HotloopError as e:
            conn.send(("config_error", seed, str(e)))
            return
        except BaseException:  # noqa: BLE001
            conn.send(("done", seed, _crash_record(seed, traceback.format_exc(limit=3))))


def _describe(e: BaseException) -> str:
    """An unexpected exception as a user reads it: the message, the kind in brackets for a bug report."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else "no message"
    return f"{text} ({type(e).__name__})"


def _crash_record(seed: int, error: str) -> dict[str, Any]:
    from hotloop.closedloop.evaluator import failed_record

    return failed_record(seed, error)


@dataclass
class _Worker:
    proc: Any
    conn: Connection
    seed: int | None = None
    ready: bool = False
    build_s: float | None = None  # until its first episode is reported


def run_episodes(
    job: EpisodeJob,
    seeds: list[int],
    workers: int = 2,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    on_timing: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Play every seed; returns (records in seed order, interrupted). `on_timing` gets, just before
    `on_result` of the same episode, where and how long it ran: {"pid", "episode_s", "build_s"} (build_s:
    the worker's env and policy build, on its first episode; 0 after)."""
    from hotloop.interrupts import first_interrupt_only

    with first_interrupt_only():
        return _run_episodes(job, seeds, workers, on_result, on_timing)


def _run_episodes(
    job: EpisodeJob,
    seeds: list[int],
    workers: int,
    on_result: Callable[[dict[str, Any]], None] | None,
    on_timing: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    results: dict[int, dict[str, Any]] = {}

    def finish(record: dict[str, Any], build_s: float | None = None) -> None:
        timing = record.pop(EXEC_KEY, None) or {"pid": None, "episode_s": None}
        if on_timing is not None:
            on_timing({**timing, "build_s": build_s or 0.0})
        results[record["seed"]] = record
        if on_result is not None:
            on_result(record)

    if workers <= 0:
        t0 = time.perf_counter()
        runner = EpisodeRunner(job)
        build_s: float | None = time.perf_counter() - t0
        try:
            for seed in seeds:
                t1 = time.perf_counter()
                record = runner.run(seed)
                record[EXEC_KEY] = {"pid": os.getpid(), "episode_s": time.perf_counter() - t1}
                finish(record, build_s)
                build_s = None
        except KeyboardInterrupt:
            return [results[s] for s in seeds if s in results], True
        finally:
            runner.env.close()
        return [results[s] for s in seeds], False

    ctx = mp.get_context("spawn")  # fork would copy torch threads and an EGL context: unsafe
    queue = list(seeds)
    pool: list[_Worker] = []
    startup_failures = 0

    def start() -> None:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, job), daemon=True)
        proc.start()
        child.close()
        pool.append(_Worker(proc, parent))

    def give(w: _Worker) -> None:
        if queue:
            w.seed = queue.pop(0)
            w.conn.send(w.seed)
        else:
            w.seed = None
            w.conn.send(None)

    for _ in range(min(workers, len(seeds))):
        start()
    interrupted = False
    try:
        while len(results) < len(seeds) and pool:
            ready = wait([w.conn for w in pool] + [w.proc.sentinel for w in pool])
            for w in list(pool):
                dead = False
                if w.conn in ready:
                    try:
                        kind, a, b = w.conn.recv()
                    except (EOFError, OSError):
                        dead = True  # the pipe closed: the process is gone (or going)
                    else:
                        if kind == "ready":
                            w.ready = True
                            w.build_s = a
                            give(w)
                        elif kind == "done":
                            finish(b, w.build_s)
                            w.build_s = None
                            give(w)
                        elif kind == "init_error":
                            if b:  # a configuration error: every worker would hit it
                                raise ConfigError(str(a))
                            raise HotloopError(f"evaluation worker could not start: {a}")
                        elif kind == "config_error":
                            raise ConfigError(str(b))
                        continue
                if dead or w.proc.sentinel in ready:
                    if not dead and w.conn.poll():
                        continue  # read its last message first
                    w.proc.join(timeout=5)
                    pool.remove(w)
                    code = w.proc.exitcode
                    if w.seed is not None:
                        finish(
                            _crash_record(
                                w.seed, f"worker process died (exit code {code}) in episode seed {w.seed}"
                            )
                        )
                    elif not w.ready:
                        startup_failures += 1
                        if startup_failures >= 3:
                            raise HotloopError(
                                f"evaluation workers keep dying at start-up (exit code {code})"
                            )
                    if queue:
                        start()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for w in pool:
            if w.proc.is_alive():
                if interrupted or len(results) < len(seeds):
                    w.proc.terminate()
                else:
                    try:
                        w.conn.send(None)
                    except OSError:
                        w.proc.terminate()
            w.proc.join(timeout=5)
            if w.proc.is_alive():
                w.proc.kill()
    return [results[s] for s in seeds if s in results], interrupted
