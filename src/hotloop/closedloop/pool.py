"""The local executor: evaluation worker processes that survive crashes and Ctrl-C, kept across runs.

A `WorkerPool` starts its processes on its first run and keeps them until it is closed, so a sweep's
cells and an eval's points reuse them: a worker builds its env and policy once per build key
(`hotloop.closedloop.workers.RunnerCache`) instead of once per point. Each message hands a worker one
(job, seed); a worker takes episodes of the job it last played while any remain, and gets its next
episode before the parent does its own bookkeeping (the store's fsync, the progress bar). While there is
more work left than workers, each holds a second episode in its pipe, so it never waits for the parent;
near the end it holds one, so no worker sits on an episode another one could start.

The parent waits on every pipe and every process sentinel at once, so a worker that dies (a segfault in
a native library, an out-of-memory kill) is noticed at once: its running episode is recorded as an error
(not a policy failure) with its seed and the error, the one queued behind it goes back to the queue, and
a fresh worker takes over. A Python exception inside an episode is an error episode too (the worker
survives). Ctrl-C stops the workers and returns what finished, flagged `interrupted`; further presses
while the workers stop are noted, not raised (`hotloop.interrupts`), so the finished episodes always
come back. SIGTERM (`timeout`, `kill`, a job scheduler) does in the parent what Ctrl-C does. Workers
ignore SIGINT (the terminal sends it to the whole process group); only the parent decides. A SIGTERM
ends a worker (the parent stops them with it), and a worker whose parent is gone (killed with SIGKILL,
say) exits at once (`_exit_with_parent`): no worker outlives its parent. `workers=0` runs everything in
this process (for debugging and tests).

Each finished episode comes with its timing (`on_done`'s third argument): {"pid", "slot" (the worker's
place in the pool, kept by its replacement), "episode_s" (the episode, in the worker), "build_s" (an env
and policy build just before it, else 0), "wait_s" (the worker idle between its previous episode and
this one: dispatch seen from the worker)}.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from types import TracebackType
from typing import Any

from hotloop.closedloop.workers import EpisodeJob, RunnerCache, _crash_record, _describe, build_key
from hotloop.errors import ConfigError, HotloopError

IN_FLIGHT = 2  # episodes a worker holds while the queue has more than one per worker
STARTUP_FAILURES = 3  # workers dying before they finish a build: then the run stops

Work = list[tuple[EpisodeJob, int]]  # (job, seed) per episode
OnDone = Callable[[int, dict[str, Any], dict[str, Any]], None]  # (index into work, record, timing)


PARENT_POLL_S = 0.5  # how often a worker checks that its parent is still there (where prctl is missing)


def _exit_with_parent(parent_pid: int) -> None:
    """Make this worker end when its parent does: Linux's parent-death signal (SIGKILL the moment the
    parent exits, even stuck in native code), and a thread that checks the parent every half second
    (elsewhere, and for a parent that died before the signal was set)."""
    import sys
    import threading

    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # the thread below still ends the worker

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)  # the parent is gone: nobody will read what this worker computes
            time.sleep(PARENT_POLL_S)

    threading.Thread(target=watch, name="hotloop-parent-watch", daemon=True).start()


def _worker(conn: Connection, parent_pid: int | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the parent decides when to stop
    if parent_pid is not None:
        _exit_with_parent(parent_pid)
    cache = RunnerCache(kept=1)
    free = time.perf_counter()
    while True:
        message = conn.recv()
        if message is None:
            cache.close()
            return
        index, seed, job = message
        got = time.perf_counter()
        try:
            runner, build_s = cache.get(job)
        except HotloopError as e:  # bad input: the parent prints the message as it is
            conn.send(("init_error", index, (str(e), True)))
            return
        except BaseException as e:  # noqa: BLE001 - report why the worker cannot start
            conn.send(("init_error", index, (_describe(e), False)))
            return
        if build_s:
            conn.send(("built", index, build_s))
        t1 = time.perf_counter()
        try:
            record = runner.run(seed)
        except HotloopError as e:
            conn.send(("config_error", index, str(e)))
            return
        except BaseException:  # noqa: BLE001
            record = _crash_record(seed, traceback.format_exc(limit=3))
        timing = {
            "pid": os.getpid(),
            "episode_s": time.perf_counter() - t1,
            "build_s": build_s,
            "wait_s": got - free,
        }
        conn.send(("done", index, (record, timing)))
        free = time.perf_counter()


@dataclass
class _Worker:
    proc: Any
    conn: Connection
    slot: int
    key: EpisodeJob | None = None  # the build key of the last job it was sent
    job: EpisodeJob | None = None
    building: bool = True  # until it reports its build done (dying now is a start-up failure)
    held: deque[int] = field(default_factory=deque)  # indices sent, in the order it plays them


class WorkerPool:
    """`workers` processes (0: this process), started on the first `run` and kept until `close`."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: list[_Worker] = []
        self._here: RunnerCache | None = None  # workers=0
        self._ctx = mp.get_context("spawn")  # fork would copy torch threads and an EGL context: unsafe

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def run(self, work: Work, on_done: OnDone) -> bool:
        """Play every (job, seed) of `work`; `on_done(index, record, timing)` as each finishes. Returns
        whether Ctrl-C stopped it (the episodes reported so far are all that finished)."""
        from hotloop.interrupts import first_interrupt_only

        with first_interrupt_only():
            if self.workers <= 0:
                return self._run_here(work, on_done)
            return self._run_processes(work, on_done)

    def close(self) -> None:
        """Stop the workers: each finishes nothing more (a run is over when `close` is called)."""
        for w in self._pool:
            if w.proc.is_alive():
                try:
                    w.conn.send(None)
                except OSError:
                    w.proc.terminate()
        self._stop(graceful=True)
        if self._here is not None:
            self._here.close()
            self._here = None

    def _stop(self, graceful: bool) -> None:
        for w in self._pool:
            if not graceful and w.proc.is_alive():
                w.proc.terminate()
            w.proc.join(timeout=5)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=5)
        self._pool.clear()

    def _run_here(self, work: Work, on_done: OnDone) -> bool:
        if self._here is None:
            self._here = RunnerCache(kept=1)
        free = time.perf_counter()
        for index, (job, seed) in enumerate(work):
            got = time.perf_counter()
            # Ctrl-C while building (its imports, a second at start) reaches the caller, as a Ctrl-C before
            # the command has started anything does; only a stopped episode is this run being interrupted.
            runner, build_s = self._here.get(job)
            try:
                t1 = time.perf_counter()
                record = runner.run(seed)
                timing = {
                    "pid": os.getpid(),
                    "slot": 0,
                    "episode_s": time.perf_counter() - t1,
                    "build_s": build_s,
                    "wait_s": got - free,
                }
                on_done(index, record, timing)
            except KeyboardInterrupt:
                return True
            free = time.perf_counter()
        return False

    def _run_processes(self, work: Work, on_done: OnDone) -> bool:
        # Per job, in order of first appearance: a worker takes the next episode of the job it played
        # last, else of a job it has built for, else of the first job with episodes left.
        queue: dict[EpisodeJob, deque[int]] = {}
        for index, (job, _) in enumerate(work):
            queue.setdefault(job, deque()).append(index)
        left = len(work)  # episodes not handed out
        finished = 0
        startup_failures = 0

        def take(w: _Worker) -> int | None:
            nonlocal left
            order = [q for q in (w.job,) if q is not None and queue.get(q)]
            order += [j for j, q in queue.items() if q and build_key(j) == w.key]
            order += [j for j, q in queue.items() if q]
            if not order:
                return None
            left -= 1
            return queue[order[0]].popleft()

        def give(w: _Worker) -> None:
            # A second episode only while every worker can still get one: at the end, none waits behind
            # another's queued episode.
            while len(w.held) < (IN_FLIGHT if left > len(self._pool) else 1):
                index = take(w)
                if index is None:
                    return
                job, seed = work[index]
                key = build_key(job)
                if key != w.key:
                    w.building = True
                w.key, w.job = key, job
                w.held.append(index)
                w.conn.send((index, seed, job))

        def give_back(indices: list[int]) -> None:
            nonlocal left
            for index in reversed(indices):
                queue.setdefault(work[index][0], deque()).appendleft(index)
                left += 1

        def start(slot: int) -> _Worker:
            parent, child = self._ctx.Pipe()
            proc = self._ctx.Process(target=_worker, args=(child, os.getpid()), daemon=True)
            proc.start()
            child.close()
            w = _Worker(proc, parent, slot)
            self._pool.append(w)
            return w

        for w in list(self._pool):  # kept from an earlier run: still alive?
            if not w.proc.is_alive():
                self._pool.remove(w)
        slots = {w.slot for w in self._pool}
        for slot in range(self.workers):
            if len(self._pool) >= min(self.workers, len(work)):
                break
            if slot not in slots:
                start(slot)
        interrupted = False
        complete = False
        try:
            for w in self._pool:
                give(w)
            while finished < len(work) and self._pool:
                ready = wait([w.conn for w in self._pool] + [w.proc.sentinel for w in self._pool])
                for w in list(self._pool):
                    dead = False
                    if w.conn in ready:
                        try:
                            kind, index, payload = w.conn.recv()
                        except (EOFError, OSError):
                            dead = True  # the pipe closed: the process is gone (or going)
                        else:
                            if kind == "built":
                                w.building = False
                            elif kind == "done":
                                w.building = False
                                w.held.popleft()
                                give(w)  # its next episode first, then the bookkeeping
                                record, timing = payload
                                finished += 1
                                on_done(index, record, {**timing, "slot": w.slot})
                            elif kind == "init_error":
                                message, is_config = payload
                                if is_config:  # a configuration error: every worker would hit it
                                    raise ConfigError(str(message))
                                raise HotloopError(f"evaluation worker could not start: {message}")
                            elif kind == "config_error":
                                raise ConfigError(str(payload))
                            continue
                    if dead or w.proc.sentinel in ready:
                        if not dead and w.conn.poll():
                            continue  # read its last message first
                        w.proc.join(timeout=5)
                        self._pool.remove(w)
                        code = w.proc.exitcode
                        held = list(w.held)
                        if w.building:
                            startup_failures += 1
                            if startup_failures >= STARTUP_FAILURES:
                                raise HotloopError(
                                    f"evaluation workers keep dying at start-up (exit code {code})"
                                )
                            give_back(held)
                        elif held:
                            give_back(held[1:])  # queued behind the one it was playing
                            seed = work[held[0]][1]
                            finished += 1
                            on_done(
                                held[0],
                                _crash_record(
                                    seed, f"worker process died (exit code {code}) in episode seed {seed}"
                                ),
                                {"pid": w.proc.pid, "slot": w.slot},
                            )
                        if left:
                            give(start(w.slot))
            complete = finished == len(work)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if not complete:  # interrupted or failed: nothing a worker holds is wanted any more
                self._stop(graceful=False)
        return interrupted


def run_episodes(
    job: EpisodeJob,
    seeds: list[int],
    workers: int = 2,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    on_timing: Callable[[dict[str, Any]], None] | None = None,
    pool: Any = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Play every seed; returns (records in seed order, interrupted). `on_timing` gets, just before
    `on_result` of the same episode, where and how long it ran (`hotloop.closedloop.pool.Timing`).
    `pool`: a `WorkerPool` to run on (its workers stay up for the next call); None: one for this call."""
    results: dict[int, dict[str, Any]] = {}

    def on_done(index: int, record: dict[str, Any], timing: dict[str, Any]) -> None:
        if on_timing is not None:
            on_timing(timing)
        results[seeds[index]] = record
        if on_result is not None:
            on_result(record)

    work = [(job, s) for s in seeds]
    if pool is not None:
        interrupted = pool.run(work, on_done)
    else:
        with WorkerPool(workers) as own:
            interrupted = own.run(work, on_done)
    return [results[s] for s in seeds if s in results], interrupted
