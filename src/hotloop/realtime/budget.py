"""Layered latency budgets (R2.1): perception, estimation, decision, control, each with its own budget.

A `PipelineBudget` names the layers in order with a budget each. A `CycleRecorder` stamps every layer of
every cycle (monotonic clock, ns) — `with recorder.cycle() as c: with c.layer("perception"): ...` — and
takes an injected latency per layer (`c.charge(layer, ms)`: a simulated delay, e.g. a slower camera, that
the closed loop waits for but no code runs for), so one can ask what a layer's latency costs. A layer's
latency in a cycle is its measured wall time plus what was charged to it, or only the charge when the
caller says the charge replaces the wall time (`replace=True`: the decision layer under a fixed
simulated inference latency).

`budget_report` turns the cycles into a `BudgetReport`: per layer p50/p99/max, the budget and how often
it was exceeded, the whole cycle against the sum of the budgets, and the layer that breaks its budget —
the one whose p99 exceeds its budget by the largest factor (None when every layer keeps its budget).
The report renders as a table (`print_table`), JSON (`to_dict`) and a plot (`plot`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.records import plain_fields

DEFAULT_LAYERS = ("perception", "estimation", "decision", "control")


@dataclass(frozen=True)
class LayerBudget:
    name: str
    budget_ms: float

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(f"layer name {self.name!r} must be non-empty and contain no '/'")
        if not self.budget_ms > 0:
            raise ConfigError(f"budget of layer {self.name!r} must be > 0 ms (got {self.budget_ms})")


@dataclass(frozen=True)
class PipelineBudget:
    layers: tuple[LayerBudget, ...]

    def __post_init__(self) -> None:
        if not self.layers:
            raise ConfigError("a pipeline budget needs at least one layer")
        names = [layer.name for layer in self.layers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"pipeline layers must have unique names (repeated: {', '.join(dupes)})")

    @classmethod
    def of(cls, **budgets_ms: float) -> PipelineBudget:
        """`PipelineBudget.of(perception=20, estimation=2, decision=100, control=2)` (order kept)."""
        return cls(tuple(LayerBudget(k, float(v)) for k, v in budgets_ms.items()))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)

    @property
    def total_ms(self) -> float:
        return float(sum(layer.budget_ms for layer in self.layers))

    def budget_of(self, name: str) -> float:
        for layer in self.layers:
            if layer.name == name:
                return layer.budget_ms
        raise ConfigError(f"layer {name!r} is not in this pipeline; its layers are {', '.join(self.names)}")


@dataclass
class LayerSpan:
    start_ns: int
    end_ns: int
    charged_ms: float = 0.0  # injected / simulated latency, on top of (or instead of) the wall time
    replaces_wall: bool = False

    @property
    def wall_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def latency_ms(self) -> float:
        return self.charged_ms if self.replaces_wall else self.wall_ms + self.charged_ms


@dataclass
class Cycle:
    """One pass through the pipeline: per-layer timestamps (and charges), in layer order."""

    start_ns: int
    layers: dict[str, LayerSpan] = field(default_factory=dict)
    _clock: Callable[[], int] = field(default=time.perf_counter_ns, repr=False)
    _names: tuple[str, ...] = field(default=(), repr=False)

    @contextmanager
    def layer(self, name: str) -> Iterator[None]:
        if name not in self._names:
            raise ConfigError(
                f"layer {name!r} is not in this pipeline; its layers are {', '.join(self._names)}"
            )
        t0 = self._clock()
        try:
            yield
        finally:
            span = self.layers.get(name)
            if span is None:
                self.layers[name] = LayerSpan(t0, self._clock())
            else:  # a layer entered twice in a cycle: its time is the sum
                span.end_ns += self._clock() - t0

    def charge(self, name: str, ms: float, replace: bool = False) -> None:
        """Add `ms` of simulated latency to layer `name` (with `replace`, it stands for the wall time)."""
        if not ms >= 0:
            raise ConfigError(f"latency charged to layer {name!r} must be >= 0 ms (got {ms})")
        span = self.layers.setdefault(name, LayerSpan(self._clock(), self._clock()))
        span.charged_ms += float(ms)
        span.replaces_wall = span.replaces_wall or replace

    def latency_ms(self, name: str) -> float:
        span = self.layers.get(name)
        return 0.0 if span is None else span.latency_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_ns": self.start_ns,
            "layers": {
                n: {
                    "start_ns": s.start_ns,
                    "end_ns": s.end_ns,
                    "wall_ms": s.wall_ms,
                    "charged_ms": s.charged_ms,
                    "latency_ms": s.latency_ms,
                }
                for n, s in self.layers.items()
            },
        }


class CycleRecorder:
    """Collects `Cycle`s; `clock` is injectable (a simulated clock in tests)."""

    def __init__(self, budget: PipelineBudget, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.budget = budget
        self.clock = clock
        self.cycles: list[Cycle] = []

    @contextmanager
    def cycle(self) -> Iterator[Cycle]:
        c = Cycle(self.clock(), _clock=self.clock, _names=self.budget.names)
        try:
            yield c
        finally:
            self.cycles.append(c)

    @property
    def last(self) -> Cycle | None:
        return self.cycles[-1] if self.cycles else None

    def latencies_ms(self) -> dict[str, list[float]]:
        """Per layer, one latency per cycle (0 for a layer a cycle skipped)."""
        return {n: [c.latency_ms(n) for c in self.cycles] for n in self.budget.names}

    def clear(self) -> None:
        self.cycles.clear()


@dataclass(frozen=True)
class LayerReport:
    name: str
    budget_ms: float
    cycles: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    over_budget: int  # cycles in which this layer took longer than its budget

    @property
    def over_budget_rate(self) -> float:
        return self.over_budget / self.cycles if self.cycles else 0.0

    @property
    def p99_over_budget(self) -> float:
        return self.p99_ms / self.budget_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            **plain_fields(self),
            "over_budget_rate": self.over_budget_rate,
            "within_budget": self.p99_ms <= self.budget_ms,
        }


@dataclass(frozen=True)
class BudgetReport:
    layers: tuple[LayerReport, ...]
    total: LayerReport  # the whole cycle against the sum of the budgets
    breaking: str | None  # the layer whose p99 exceeds its budget by the largest factor

    def to_dict(self) -> dict[str, Any]:
        return {
            "layers": [layer.to_dict() for layer in self.layers],
            "total": self.total.to_dict(),
            "breaking_layer": self.breaking,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> BudgetReport:
        def layer(d: dict[str, Any]) -> LayerReport:
            keys = ("name", "budget_ms", "cycles", "p50_ms", "p99_ms", "max_ms", "mean_ms", "over_budget")
            return LayerReport(**{k: d[k] for k in keys})

        return cls(tuple(layer(d) for d in doc["layers"]), layer(doc["total"]), doc["breaking_layer"])

    def verdict(self) -> str:
        if self.breaking is None:
            return f"every layer kept its budget at p99 over {self.total.cycles} cycles"
        b = next(layer for layer in self.layers if layer.name == self.breaking)
        return (
            f"layer '{b.name}' breaks its budget: p99 {b.p99_ms:.1f} ms against {b.budget_ms:g} ms "
            f"(over budget in {b.over_budget}/{b.cycles} cycles)"
        )

    def print_table(self, title: str = "pipeline budget") -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, caption=self.verdict())
        for col in ("layer", "budget ms", "p50 ms", "p99 ms", "max ms", "over budget"):
            table.add_column(col)
        for r in (*self.layers, self.total):
            style = "bold red" if r.name == self.breaking else None
            table.add_row(
                r.name,
                f"{r.budget_ms:g}",
                f"{r.p50_ms:.2f}",
                f"{r.p99_ms:.2f}",
                f"{r.max_ms:.2f}",
                f"{r.over_budget}/{r.cycles}",
                style=style,
            )
        Console(stderr=True).print(table)

    def plot(self, path: str | Path, title: str | None = None) -> Path:
        """Horizontal bars: p50 (solid) and p99 (light) per layer, the budget as a black tick."""

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from hotloop.io import atomic_write_figure

        rows = (*self.layers, self.total)
        fig, ax = plt.subplots(figsize=(7, 0.6 * len(rows) + 1.2))
        y = np.arange(len(rows))[::-1]
        colours = ["tab:red" if r.name == self.breaking else "tab:blue" for r in rows]
        ax.barh(y, [r.p99_ms for r in rows], color=colours, alpha=0.35, label="p99")
        ax.barh(y, [r.p50_ms for r in rows], color=colours, label="p50")
        ax.scatter([r.budget_ms for r in rows], y, marker="|", s=400, color="black", label="budget", zorder=3)
        ax.set_yticks(y, [r.name for r in rows])
        ax.set_xlabel("latency per cycle (ms)")
        ax.set_title(title or self.verdict(), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        return atomic_write_figure(path, fig, dpi=100)


def _layer_report(name: str, budget_ms: float, samples: list[float]) -> LayerReport:
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        return LayerReport(name, budget_ms, 0, 0.0, 0.0, 0.0, 0.0, 0)
    p50, p99 = np.percentile(x, [50, 99])
    return LayerReport(
        name, budget_ms, int(x.size), float(p50), float(p99), float(x.max()), float(x.mean()),
        int((x > budget_ms).sum()),
    )  # fmt: skip


def budget_report(budget: PipelineBudget, latencies_ms: dict[str, list[float]]) -> BudgetReport:
    """Report from per-layer latency lists of equal length (one entry per cycle, as recorded)."""
    lengths = {len(v) for v in latencies_ms.values()}
    if len(lengths) > 1:
        raise ConfigError("every layer needs one latency per cycle (got lists of different lengths)")
    unknown = set(latencies_ms) - set(budget.names)
    if unknown:
        raise ConfigError(f"latencies for layers not in the budget: {', '.join(sorted(unknown))}")
    n = lengths.pop() if lengths else 0
    per_layer = {name: list(latencies_ms.get(name, [0.0] * n)) for name in budget.names}
    layers = tuple(
        _layer_report(layer.name, layer.budget_ms, per_layer[layer.name]) for layer in budget.layers
    )
    totals = [float(sum(v[i] for v in per_layer.values())) for i in range(n)]
    total = _layer_report("total", budget.total_ms, totals)
    over = [r for r in layers if r.cycles and r.p99_ms > r.budget_ms]
    breaking = max(over, key=lambda r: r.p99_over_budget).name if over else None
    return BudgetReport(layers, total, breaking)


def merge_latencies(parts: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Concatenate per-layer latency lists (e.g. one per episode) in order."""
    out: dict[str, list[float]] = {}
    for part in parts:
        for name, values in part.items():
            out.setdefault(name, []).extend(values)
    return out
