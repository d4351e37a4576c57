"""Presenting bench results: a terminal table, JSON, and a histogram + CDF plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hotloop.io import atomic_write_figure, atomic_write_json
from hotloop.measure.bench import TOTAL_STAGE, BenchResult
from hotloop.measure.stats import JITTER_RATIO

_COLUMNS = ("p50", "p90", "p95", "p99", "max", "mean", "std")


def _ms(value: float) -> str:
    # Three decimals resolve sub-millisecond stages; above 100 ms they are noise and widen the table.
    return f"{value:.3f}" if value < 100 else f"{value:.1f}"


def bench_table(result: BenchResult) -> Any:
    """A rich Table: one row per stage (nested stages indented), total last, compare beneath."""
    from rich.table import Table

    table = Table(title=f"{result.target}: {result.iterations} iterations after {result.warmup} warm-up (ms)")
    table.add_column("stage")
    for col in _COLUMNS:
        table.add_column(col, justify="right", no_wrap=True)
    for name, stats in result.stages.items():
        depth = name.count("/")
        label = ("  " * depth + name.rsplit("/", 1)[-1]) if name != TOTAL_STAGE else "[bold]total[/bold]"
        table.add_row(label, *(_ms(getattr(stats, c)) for c in _COLUMNS))
    if result.compare is not None:
        other = result.compare.latency
        table.add_row(
            f"[dim]compare: {result.compare.target}[/dim]", *(_ms(getattr(other, c)) for c in _COLUMNS)
        )
    return table


def roofline_table(result: BenchResult) -> Any:
    """Per stage: analytic GFLOP and weight MB, achieved GFLOP/s at p50, and its share of the matmul peak
    this machine reaches at the stage's precision (None when the target states no analytic work)."""
    if not result.roofline:
        return None
    from rich.table import Table

    peaks = result.roofline.get("peaks") or {}
    threads = peaks.get("threads", "?")
    table = Table(title=f"roofline (matmul peaks measured at {threads} threads; see hotloop doctor)")
    for col in ("stage", "precision", "GFLOP", "weights MB", "GFLOP/s", "peak GFLOP/s", "of peak"):
        table.add_column(col, justify="left" if col in ("stage", "precision") else "right")

    def num(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    for stage, row in result.roofline["stages"].items():
        share = row["peak_share"]
        table.add_row(
            stage,
            row["precision"],
            num(row["gflop"], ".3g"),
            num(row["weight_mb"], ".1f"),
            num(row["achieved_gflops"], ".1f"),
            num(row["peak_gflops"], ".1f"),
            "n/a" if share is None else f"{100 * share:.1f} %",
        )
    return table


def summary_lines(result: BenchResult) -> list[str]:
    lat = result.latency
    lines = [f"control rate: {lat.rate_hz_p50:.1f} Hz at p50, {lat.rate_hz_p99:.1f} Hz at p99"]
    if result.info.get("load_s") is not None:  # an artifact: its load is part of what a robot waits for
        lines.append(f"loaded in {result.info['load_s']:.2f} s ({result.info.get('load_cache', '')})")
    if result.jitter_warning:
        lines.append(
            f"[yellow]jitter warning: p95 {lat.p95:.3f} ms > {JITTER_RATIO} x p50 {lat.p50:.3f} ms — "
            "look for contention, throttling or allocation in the hot loop[/yellow]"
        )
    if result.compare is not None:
        c = result.compare
        lines.append(
            f"{result.target} is {c.ratio_p50:.2f}x as fast as {c.target} at p50 and {c.ratio_p99:.2f}x at p99 "
            "(interleaved in one run)"
        )
    busy = result.contention
    if busy is not None:
        lines.append(
            f"beside {busy.processes} busy process{'es' if busy.processes != 1 else ''}: p50 "
            f"{busy.latency.p50:.3f} ms ({busy.inflation_p50:.2f}x quiet), p99 {busy.latency.p99:.3f} ms "
            f"({busy.inflation_p99:.2f}x quiet); {busy.blocks} blocks of each, alternating"
        )
    if result.roofline:
        shares = [
            f"{stage} {100 * row['peak_share']:.0f} %"
            for stage, row in result.roofline["stages"].items()
            if row["peak_share"] is not None
        ]
        if shares:
            lines.append("share of this machine's matmul peak at p50: " + ", ".join(shares))
    return lines


def write_json(result: BenchResult, path: str | Path) -> Path:
    return atomic_write_json(path, result.to_dict())


def plot_latency(result: BenchResult, path: str | Path) -> Path:
    """Histogram and CDF of per-iteration latency, with p50/p99 marked (and the comparison, if any)."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [(result.target, np.asarray(result.samples_ms), result.latency)]
    if result.compare is not None and result.compare.samples_ms:
        series.append(
            (
                f"{result.compare.target} (compare)",
                np.asarray(result.compare.samples_ms),
                result.compare.latency,
            )
        )
    fig, (ax_hist, ax_cdf) = plt.subplots(1, 2, figsize=(11, 4))
    for label, samples, stats in series:
        ax_hist.hist(samples, bins=min(60, max(10, samples.size // 4)), alpha=0.6, label=label)
        xs = np.sort(samples)
        ax_cdf.plot(xs, np.arange(1, xs.size + 1) / xs.size, label=label)
        for q, style in (("p50", "--"), ("p99", ":")):
            value = getattr(stats, q)
            ax_hist.axvline(value, linestyle=style, color="k", linewidth=1)
            ax_cdf.axvline(value, linestyle=style, color="k", linewidth=1)
            ax_cdf.annotate(f"{q} {value:.2f}", (value, 0.05 if q == "p50" else 0.5), rotation=90, fontsize=8)
    ax_hist.set_xlabel("latency (ms)")
    ax_hist.set_ylabel("iterations")
    ax_hist.set_title("distribution")
    ax_cdf.set_xlabel("latency (ms)")
    ax_cdf.set_ylabel("fraction ≤ x")
    ax_cdf.set_title("CDF")
    ax_cdf.legend(fontsize=8)
    ax_hist.legend(fontsize=8)
    fig.suptitle(f"{result.target} — {result.iterations} iterations")
    fig.tight_layout()
    return atomic_write_figure(path, fig, dpi=110)
