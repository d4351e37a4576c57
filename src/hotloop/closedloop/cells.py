"""A sweep as data: cells (one evaluation point each: target, task and its kwargs, strategy, latency,
trigger, ... and a seed range), each with a stable key, and the episodes (cell, seed) they expand to.

Both executors (`hotloop.closedloop.executors` locally, `hotloop.cluster.ray_executor` on Ray) run the
same `Episode`s through the same `EpisodeRunner`, so an episode's record does not depend on where it ran.
The key hashes every field that changes an episode and nothing else (not the seed range, not the number
of workers): a results store names each row by (key, seed), so a resumed or widened sweep finds the
episodes it already holds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from hotloop.closedloop.eval_run import EvalRequest, job_for
from hotloop.closedloop.workers import EpisodeJob

__all__ = ["Cell", "Episode", "cell_key", "check_unique", "job_for"]

# EvalRequest fields that say how many episodes run and where, not what an episode is.
_NOT_IN_KEY = ("episodes", "seed", "workers")


def cell_key(request: EvalRequest) -> str:
    """16 hex digits of SHA-256 over the request's episode-defining fields, in a canonical JSON. Fields at
    their default are left out, so an option added to EvalRequest later keeps every stored key."""
    import dataclasses

    defaults = {f.name: f.default for f in dataclasses.fields(EvalRequest)}
    fields = {k: v for k, v in asdict(request).items() if k not in _NOT_IN_KEY and v != defaults[k]}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Cell:
    request: EvalRequest
    key: str

    @classmethod
    def of(cls, request: EvalRequest) -> Cell:
        return cls(request, cell_key(request))

    @property
    def seeds(self) -> list[int]:
        return [self.request.seed + i for i in range(self.request.episodes)]

    def label(self) -> str:
        """Short and human: what differs between cells in a table or an error message."""
        r = self.request
        k = "" if r.trigger_remaining is None else f" k={r.trigger_remaining}"
        return f"{r.target} {r.task} {r.strategy}{k} {r.latency}"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "request": asdict(self.request)}


@dataclass(frozen=True)
class Episode:
    """One unit of work: a cell's episode at `seed` (its job carries the torch thread count)."""

    cell: str  # Cell.key
    job: EpisodeJob
    seed: int


def check_unique(cells: list[Cell]) -> None:
    """Two cells with one key would write the same rows twice: refuse the sweep instead."""
    from hotloop.errors import ConfigError

    seen: dict[str, Cell] = {}
    for cell in cells:
        if cell.key in seen:
            raise ConfigError(
                f"two cells are the same point ({cell.label()}); list each value of an axis once"
            )
        seen[cell.key] = cell
