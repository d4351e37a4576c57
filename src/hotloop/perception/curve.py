"""The resolution–accuracy–latency curve of a detector, and the point picked from it (R2.4).

For a perception model the input resolution is the first speed knob: fewer pixels, less work, and
somewhere the accuracy falls off. Per resolution this measures

- accuracy on held-out frames: for hotloop's learned box detector, against the simulator's labels
  (`detector_eval`: IoU with misses as 0, centre error on the belt in mm, detection rate); for any ONNX
  detector without labels, agreement with its own outputs at its native resolution (`onnx_detector`);
- latency with `hotloop.measure` (warm-up, then timed calls; p50/p99): eager (torch) and compiled (an
  ONNX Runtime session on the graph exported at that resolution, one intra-op thread, measured
  interleaved with eager so both see the same machine); for an ONNX file, ONNX Runtime only;
- with `episodes`, the closed-loop success of the whole perception chain at that resolution
  (`--pipeline detector:model=...,resolution=N` on demo:conveyor);

and picks the most accurate point whose p99 (compiled when there is one, the path one deploys) fits the
budget. Accuracy is `iou` unless `metric` says `centre-mm` (lower is better there).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError

METRICS = ("iou", "centre-mm")


@dataclass
class CurvePoint:
    resolution: int
    accuracy: float | None  # the chosen metric's value
    details: dict[str, Any]  # every accuracy measure at this resolution
    eager_ms: dict[str, float] | None  # {"p50", "p99"}
    compiled_ms: dict[str, float] | None
    success_rate: float | None = None
    success_ci95: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the int8 plan's accuracy and latency

    @property
    def deploy_p99(self) -> float | None:
        lat = self.compiled_ms or self.eager_ms
        return None if lat is None else float(lat["p99"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_resolutions(text: str) -> tuple[int, ...]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            out.append(int(part))
        except ValueError:
            raise ConfigError(f"--resolutions {text!r}: {part!r} is not a whole number of pixels") from None
    if not out:
        raise ConfigError("--resolutions needs at least one size, e.g. 32,48,64,96,128")
    if len(set(out)) != len(out):
        raise ConfigError(f"--resolutions {text!r} names a size twice")
    return tuple(sorted(out))


def better(metric: str, a: float, b: float) -> bool:
    """Is accuracy `a` better than `b` under `metric`?"""
    return a < b if metric == "centre-mm" else a > b


def choose(points: list[CurvePoint], metric: str, budget_ms: float | None) -> CurvePoint | None:
    """The most accurate point whose deploy p99 fits the budget (every point without a budget); ties go
    to the faster. None when no point fits."""
    fits = [
        p
        for p in points
        if p.accuracy is not None
        and (budget_ms is None or (p.deploy_p99 is not None and p.deploy_p99 <= budget_ms))
    ]
    best: CurvePoint | None = None
    for p in fits:
        acc, best_acc = float(p.accuracy), None if best is None else float(best.accuracy)  # type: ignore[arg-type]
        faster = best is not None and acc == best_acc and (p.deploy_p99 or 0.0) < (best.deploy_p99 or 0.0)
        if best_acc is None or better(metric, acc, best_acc) or faster:
            best = p
    return best


def time_calls(
    name: str, run: Any, iters: int, warmup: int, compare: tuple[str, Any] | None = None
) -> tuple[dict[str, float], dict[str, float] | None]:
    """p50/p99 (ms) of `run()` and, interleaved in the same run, of `compare`'s call."""
    from hotloop.measure.bench import BenchConfig, run_bench
    from hotloop.measure.case import BenchCase

    config = BenchConfig(warmup=warmup, iterations=iters, progress=False, roofline=False)
    other = None if compare is None else BenchCase(compare[0], lambda timer: compare[1]())
    result = run_bench(BenchCase(name, lambda timer: run()), config, other)
    first = {"p50": result.latency.p50, "p99": result.latency.p99}
    second = None
    if result.compare is not None:
        second = {"p50": result.compare.latency.p50, "p99": result.compare.latency.p99}
    return first, second


def print_table(points: list[CurvePoint], chosen: CurvePoint | None, metric: str, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    def ms(lat: dict[str, float] | None, key: str) -> str:
        return "-" if lat is None else f"{lat[key]:.3f}"

    table = Table(title=title)
    table.add_column("px", justify="right")
    table.add_column(metric, justify="right")
    shown = {"iou": "iou", "centre_mm_p50": "centre mm p50", "detection_rate": "detected", "input": "input"}
    key = {"iou": "iou", "centre-mm": "centre_mm_p50"}[metric]
    extra_cols = [k for k in shown if k != key and any(k in p.details for p in points)]
    for k in extra_cols:
        table.add_column(shown[k], justify="right")
    for col in ("eager p50", "eager p99", "compiled p50", "compiled p99"):
        table.add_column(col + " ms", justify="right")
    show_success = any(p.success_rate is not None for p in points)
    if show_success:
        table.add_column("success", justify="right")
    show_int8 = any("int8" in p.extra for p in points)
    if show_int8:
        for col in (f"int8 {metric}", "int8 p50 ms", "int8 p99 ms"):
            table.add_column(col, justify="right")
    for p in points:
        mark = " *" if chosen is p else ""
        row = [f"{p.resolution}{mark}", _fmt(p.accuracy)]
        row += [_fmt(p.details.get(k)) for k in extra_cols]
        row += [
            ms(p.eager_ms, "p50"),
            ms(p.eager_ms, "p99"),
            ms(p.compiled_ms, "p50"),
            ms(p.compiled_ms, "p99"),
        ]
        if show_success:
            row.append("-" if p.success_rate is None else f"{p.success_rate:.0%}")
        if show_int8:
            q = p.extra.get("int8") or {}
            row += [_fmt(q.get("accuracy")), ms(q.get("latency_ms"), "p50"), ms(q.get("latency_ms"), "p99")]
        table.add_row(*row)
    Console().print(table)


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def plot_curve(
    points: list[CurvePoint],
    chosen: CurvePoint | None,
    metric: str,
    budget_ms: float | None,
    path: Path,
    title: str,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    series: list[tuple[str, str, Any]] = [
        ("eager", "o", lambda p: (p.eager_ms, p.accuracy)),
        ("compiled (ONNX Runtime)", "s", lambda p: (p.compiled_ms, p.accuracy)),
        (
            "int8",
            "^",
            lambda p: (
                (p.extra.get("int8") or {}).get("latency_ms"),
                (p.extra.get("int8") or {}).get("accuracy"),
            ),
        ),
    ]
    for label, marker, get in series:
        xs, ys, rs = [], [], []
        for p in points:
            lat, acc = get(p)
            if lat is not None and acc is not None:
                xs.append(lat["p50"])
                ys.append(acc)
                rs.append(p.resolution)
        if not xs:
            continue
        ax.plot(xs, ys, marker=marker, label=label)
        for x, y, r in zip(xs, ys, rs, strict=True):
            ax.annotate(f"{r}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if budget_ms is not None:
        ax.axvline(budget_ms, color="red", ls="--", lw=1, label=f"budget {budget_ms:g} ms (p99)")
    if chosen is not None and chosen.accuracy is not None:
        lat = chosen.compiled_ms or chosen.eager_ms
        if lat is not None:
            ax.scatter(
                [lat["p50"]], [chosen.accuracy], s=160, facecolors="none", edgecolors="k", label="chosen"
            )
    ax.set_xlabel("latency p50 (ms)")
    ax.set_ylabel(metric + (" (lower is better)" if metric == "centre-mm" else ""))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def metric_value(details: dict[str, Any], metric: str) -> float | None:
    key = {"iou": "iou", "centre-mm": "centre_mm_p50"}[metric]
    value = details.get(key)
    return None if value is None else float(value)


def summary(
    points: list[CurvePoint], chosen: CurvePoint | None, metric: str, budget_ms: float | None, **info: Any
) -> dict[str, Any]:
    return {
        **info,
        "metric": metric,
        "budget_ms": budget_ms,
        "points": [p.to_dict() for p in points],
        "chosen": None if chosen is None else chosen.to_dict(),
    }
