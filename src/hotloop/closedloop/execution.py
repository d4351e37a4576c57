"""What both executors share: their options, the row of a finished episode, the run's cost figures.

Cost figures (`ExecStats.summary`): wall time, episodes/s, and the scheduling overhead per episode,
(slots x wall - episode time - env/policy build time) / episodes, where a slot is one worker: the time
a worker was held but not playing or building (process start, dispatch, the idle tail of the sweep).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import typer

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


def print_summary(summary: dict[str, Any]) -> None:
    """The executor's cost, on stderr (stdout holds the tables)."""
    n = summary["episodes"]
    if not n:
        return
    nodes = ", ".join(f"{k} {v}" for k, v in summary["per_node"].items())
    pct = summary.get("overhead_pct_of_episode")
    overhead = summary["overhead_per_episode_s"]
    typer.echo(
        f"{summary['executor']} ({summary['slots']} worker{'s' if summary['slots'] != 1 else ''}): {n} episodes in "
        f"{summary['wall_s']:.1f} s, {summary['episodes_per_s']:.2f} episodes/s; scheduling overhead "
        f"{1000 * overhead:.0f} ms per episode"
        + (f" ({pct:.1f}% of an episode)" if pct is not None else "")
        + f"; per node: {nodes}",
        err=True,
    )
