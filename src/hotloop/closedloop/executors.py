"""Run a sweep's episodes on an executor and hand back each one as a row (`store.py` for the row).

Two executors, one contract: `local` (the worker pool of `workers.py`, one cell after another) and `ray`
(`hotloop.cluster.ray_executor`, every cell at once over the cluster's actors). Both run the episodes
through `EpisodeRunner` with the same job, so the records are the same seed for seed; only the row's
`node`, `pid` and timings say where it ran.

Cost figures (`ExecStats.summary`): wall time, episodes/s, and the scheduling overhead per episode,
(slots x wall - episode time - env/policy build time) / episodes, where a slot is one worker: the time
a worker was held but not playing or building (process start, dispatch, the idle tail of the sweep).
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hotloop.closedloop.cells import Cell, Episode, job_for
from hotloop.closedloop.store import outcome

Row = dict[str, Any]


@dataclass(frozen=True)
class ExecOptions:
    workers: int = 2  # local worker processes (0: in this process)
    cluster: str | None = None  # None: local; "ray:local", "ray://HOST:PORT", "ray:ADDRESS", "ray"
    cpus_per_worker: float = 1.0  # Ray: CPUs each actor holds (its torch threads: this, rounded up)
    memory_mb: float | None = None  # Ray: memory each actor reserves (scheduling, not a hard cap)
    max_workers: int | None = None  # Ray: at most this many actors (default: what the cluster's CPUs hold)
    progress: bool = True

    def threads(self) -> int | None:
        """Torch threads per worker: one core per local worker, an actor's CPUs on Ray (None: in-process)."""
        import math

        if self.cluster is not None:
            return max(1, math.ceil(self.cpus_per_worker))
        return 1 if self.workers >= 1 else None


@dataclass
class ExecStats:
    """Counts and timings as rows arrive; the progress bar's postfix and the run's summary."""

    total: int
    executor: str
    slots: int = 1
    t0: float = field(default_factory=time.perf_counter)
    rows: int = 0
    wins: int = 0
    errors: int = 0
    episode_s: float = 0.0
    build_s: float = 0.0
    per_node: Counter[str] = field(default_factory=Counter)

    def add(self, row: Row) -> None:
        self.rows += 1
        self.wins += int(row["outcome"] == "success")
        self.errors += int(row["outcome"] == "error")
        self.episode_s += row.get("episode_s") or 0.0
        self.build_s += row.get("build_s") or 0.0
        self.per_node[str(row.get("node"))] += 1

    def postfix(self) -> str:
        elapsed = max(1e-9, time.perf_counter() - self.t0)
        text = f"success {self.wins}/{self.rows - self.errors}" + (
            f", {self.errors} crashed" if self.errors else ""
        )
        if len(self.per_node) > 1:
            text += "; " + ", ".join(f"{n} {c / elapsed:.2f}/s" for n, c in sorted(self.per_node.items()))
        return text

    def summary(self, interrupted: bool, refused: dict[str, str] | None = None) -> dict[str, Any]:
        wall = time.perf_counter() - self.t0
        n = self.rows
        overhead = (self.slots * wall - self.episode_s - self.build_s) / n if n else None
        return {
            "executor": self.executor,
            "slots": self.slots,
            "episodes": n,
            "interrupted": interrupted,
            "wall_s": round(wall, 3),
            "episodes_per_s": round(n / wall, 4) if wall > 0 else None,
            "episode_s_mean": round(self.episode_s / n, 4) if n else None,
            "build_s_total": round(self.build_s, 3),
            "overhead_per_episode_s": None if overhead is None else round(overhead, 4),
            "overhead_pct_of_episode": (
                round(100 * overhead / (self.episode_s / n), 2)
                if n and overhead is not None and self.episode_s
                else None
            ),
            "per_node": dict(sorted(self.per_node.items())),
            "refused": refused or {},
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def make_row(cell: str, record: dict[str, Any], timing: dict[str, Any], node: str) -> Row:
    return {
        "cell": cell,
        "seed": int(record["seed"]),
        "outcome": outcome(record),
        "record": record,
        "node": node,
        "pid": timing.get("pid"),
        "episode_s": timing.get("episode_s"),
        "build_s": timing.get("build_s") or 0.0,
    }


@dataclass
class ExecResult:
    interrupted: bool
    summary: dict[str, Any]
    refused: dict[str, str]  # cell key -> why no worker would take it (its episodes did not run)


def execute(
    cells: list[Cell], todo: list[Episode], on_row: Callable[[Row], None], options: ExecOptions
) -> ExecResult:
    """Run `todo` (episodes of `cells`) on the executor `options` name; `on_row` gets each finished one."""
    from hotloop.progress import Progress

    if options.cluster is not None:
        from hotloop.cluster.ray_executor import run_on_ray

        return run_on_ray(cells, todo, on_row, options)
    stats = ExecStats(len(todo), "local", slots=max(1, options.workers))
    bar = Progress(len(todo), "sweep", "ep", enabled=options.progress)
    node = socket.gethostname()
    interrupted = False
    by_cell: dict[str, list[Episode]] = {}
    for ep in todo:
        by_cell.setdefault(ep.cell, []).append(ep)
    with bar:
        for key, episodes in by_cell.items():
            timings: list[dict[str, Any]] = []

            def on_result(
                record: dict[str, Any], key: str = key, timings: list[dict[str, Any]] = timings
            ) -> None:
                row = make_row(key, record, timings.pop() if timings else {}, node)
                on_row(row)
                stats.add(row)
                bar.update(1, stats.postfix())

            from hotloop.closedloop.workers import run_episodes

            _, interrupted = run_episodes(
                episodes[0].job, [e.seed for e in episodes], options.workers, on_result, timings.append
            )
            if interrupted:
                break
    return ExecResult(interrupted, stats.summary(interrupted), {})


def episodes_of(cells: list[Cell], done: set[tuple[str, int]], options: ExecOptions) -> list[Episode]:
    """Every (cell, seed) not in `done`, cell by cell (so that workers rebuild as rarely as they can)."""
    threads = options.threads()
    todo: list[Episode] = []
    for cell in cells:
        job = job_for(cell.request, threads)
        todo.extend(Episode(cell.key, job, s) for s in cell.seeds if (cell.key, s) not in done)
    return todo
