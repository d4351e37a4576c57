"""What both executors share: their options, the row of a finished episode, the run's cost figures.

Cost figures (`ExecStats.summary`). A slot is one worker (a local process or a Ray actor) held for the
executor's whole wall time (from its start to the last row). Every slot-second is one of:

- episode: playing an episode (measured in the worker, `episode_s`);
- build: building an env and policy (`build_s`, once per worker and build key);
- dispatch: the worker idle between two of its episodes, waiting for the next one (`wait_s`, measured in
  the worker: the round trip and whatever the driver did first);
- tail: after a worker's last episode, while others finish theirs (the driver's clock);
- start: the rest: starting the worker (process or actor, its imports) until its first episode arrives.

The overhead per episode is (slots x wall - episode time) / episodes: everything but playing, so its
ratio to the mean episode is what running through the executor costs on top of the episodes themselves.
Of it, build, start and tail are paid once per worker (they shrink per episode as a run grows); dispatch
is paid every episode (`dispatch_per_episode_s`).
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
    wait_s: float = 0.0
    last: dict[Any, float] = field(default_factory=dict)  # slot -> when its last row arrived
    per_node: Counter[str] = field(default_factory=Counter)

    def add(self, row: Row, slot: Any = None) -> None:
        self.wins += int(row["outcome"] == "success")
        self.errors += int(row["outcome"] == "error")
        self.timed(row, slot)

    def timed(self, timing: dict[str, Any], slot: Any = None) -> None:
        """A finished episode's timing (a row, or a worker's timing with its "node")."""
        self.rows += 1
        self.episode_s += timing.get("episode_s") or 0.0
        self.build_s += timing.get("build_s") or 0.0
        self.wait_s += timing.get("wait_s") or 0.0
        self.last[slot] = time.perf_counter()
        self.per_node[str(timing.get("node"))] += 1

    def postfix(self) -> str:
        elapsed = max(1e-9, time.perf_counter() - self.t0)
        text = f"success {self.wins}/{self.rows - self.errors}" + (
            f", {self.errors} crashed" if self.errors else ""
        )
        if len(self.per_node) > 1:
            text += "; " + ", ".join(f"{n} {c / elapsed:.2f}/s" for n, c in sorted(self.per_node.items()))
        return text

    def summary(self, interrupted: bool, refused: dict[str, str] | None = None) -> dict[str, Any]:
        end = max(self.last.values()) if self.last and not interrupted else time.perf_counter()
        wall = end - self.t0
        n = self.rows
        held = self.slots * wall
        overhead = (held - self.episode_s) / n if n else None
        tail = sum(end - t for t in self.last.values())
        parts = {  # slot-seconds, summed over the slots (see the module's docstring)
            "build": self.build_s,
            "start": held - self.episode_s - self.build_s - self.wait_s - tail,
            "dispatch": self.wait_s,
            "tail": tail,
        }
        mean = self.episode_s / n if n else 0.0

        def pct(seconds: float | None) -> float | None:
            return round(100 * seconds / mean, 2) if seconds is not None and mean > 0 else None

        dispatch = self.wait_s / n if n else None
        return {
            "executor": self.executor,
            "slots": self.slots,
            "episodes": n,
            "interrupted": interrupted,
            "wall_s": round(wall, 3),
            "episodes_per_s": round(n / wall, 4) if wall > 0 else None,
            "episode_s_mean": round(mean, 4) if n else None,
            "build_s_total": round(self.build_s, 3),
            "overhead_per_episode_s": None if overhead is None else round(overhead, 4),
            "overhead_pct_of_episode": pct(overhead),
            "overhead_parts_s": {k: round(v, 3) for k, v in parts.items()},
            "dispatch_per_episode_s": None if dispatch is None else round(dispatch, 5),
            "dispatch_pct_of_episode": pct(dispatch),
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
        "wait_s": timing.get("wait_s"),
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
    parts = summary.get("overhead_parts_s") or {}
    dispatch = summary.get("dispatch_per_episode_s")
    typer.echo(
        f"{summary['executor']} ({summary['slots']} worker{'s' if summary['slots'] != 1 else ''}): {n} episodes in "
        f"{summary['wall_s']:.1f} s, {summary['episodes_per_s']:.2f} episodes/s; overhead "
        f"{1000 * overhead:.0f} ms per episode"
        + (f" ({pct:.1f}% of an episode)" if pct is not None else "")
        + (
            f": start {parts['start']:.1f} s, builds {parts['build']:.1f} s, idle tail {parts['tail']:.1f} s "
            f"(once per worker), dispatch {1000 * dispatch:.1f} ms per episode"
            if parts and dispatch is not None
            else ""
        )
        + f"; per node: {nodes}",
        err=True,
    )
