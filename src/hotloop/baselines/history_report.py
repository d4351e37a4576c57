"""`hotloop history DIR`: the runs in order, what changed between each and the one before, and a plot.

"The one before" is the previous run of the same kind and the same policy (an artifact counts as its
source target), so a history that mixes targets still reads as one line of evidence per target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.measure.compare import Interval
from hotloop.measure.history import HistoryRun


@dataclass(frozen=True)
class HistoryRow:
    run: HistoryRun
    figures: str
    versus: str  # against the previous run of its kind and policy
    changed: str


def _bench_figures(result: dict[str, Any]) -> str:
    from hotloop.measure.compare import quantile_interval

    samples = result.get("samples_ms") or []
    p50 = quantile_interval(samples, 0.5)
    p99 = quantile_interval(samples, 0.99)
    return (
        f"p50 {p50.estimate:.3f} ms ({p50.low:.3f}–{p50.high:.3f}), "
        f"p99 {p99.estimate:.3f} ms ({p99.low:.3f}–{p99.high:.3f})"
    )


def _eval_figures(result: dict[str, Any]) -> str:
    from hotloop.closedloop.baseline import eval_runs, run_key

    parts = []
    for r in eval_runs(result):
        lo, hi = r.get("success_ci95") or (0.0, 1.0)
        parts.append(
            f"{run_key(r).label} {r.get('successes')}/{r.get('completed')} ({100 * lo:.0f}–{100 * hi:.0f} %)"
        )
    return "; ".join(parts)


def _demo_figures(result: dict[str, Any]) -> str:
    rungs = result.get("rungs") or []
    failed = sum(1 for r in rungs if r.get("error"))
    return f"{len(rungs)} rungs" + (f", {failed} failed" if failed else "")


def _bench_versus(previous: dict[str, Any], result: dict[str, Any], threshold: float) -> tuple[str, str]:
    from hotloop.measure.baseline import compare_bench, ratio_text
    from hotloop.measure.compare import FASTER, SLOWER

    cmp = compare_bench(previous, result, threshold, "previous")
    total = next((r for r in cmp.rows if r.stage == "total"), None)
    text = "-" if total is None else f"total {ratio_text(total.change.p50)} {total.change.verdict}"
    moved = [
        f"{r.stage} {r.change.verdict}"
        for r in cmp.rows
        if r.stage != "total" and r.change.verdict in (SLOWER, FASTER)
    ]
    if moved:
        text += "; " + ", ".join(moved)
    busy = _busy_note(previous, result)
    return text + busy, cmp.differences.summary()


def _busy_note(previous: dict[str, Any], result: dict[str, Any]) -> str:
    """ " (timed on a busy machine: ...)" when either run recorded more than --max-load's default of other
    work (`machine_load`), as a gate would refuse to judge it; "" otherwise."""
    from hotloop.measure.contention import DEFAULT_MAX_LOAD, recorded_level

    levels = [recorded_level(r.get("machine_load")) for r in (previous, result)]
    busy = [
        f"{what} {lv:.2f} CPUs"
        for what, lv in zip(("then", "now"), levels, strict=True)
        if lv is not None and lv > DEFAULT_MAX_LOAD
    ]
    return f" (timed on a busy machine: {', '.join(busy)} of other work)" if busy else ""


def _eval_versus(previous: dict[str, Any], result: dict[str, Any]) -> tuple[str, str]:
    from hotloop.closedloop.baseline import compare_eval, env_differences, eval_runs
    from hotloop.measure.differences import CONTEXT, VARIABLE, Difference, Differences

    old, new = eval_runs(previous), eval_runs(result)
    points = compare_eval(old, new)
    parts = []
    for c in points:
        p = c.paired
        if p.pairs:
            parts.append(f"{c.point.label} {p.only_baseline} only then / {p.only_now} only now: {c.verdict}")
        else:
            iv = c.success
            shift = (
                ""
                if iv is None
                else f" {100 * iv.estimate:+.0f} ({100 * iv.low:+.0f} to {100 * iv.high:+.0f})"
            )
            parts.append(f"{c.point.label} no shared seed, unpaired{shift}: {c.verdict}")
    seen: dict[str, Difference] = {}
    measured: dict[str, Difference] = {}
    for c in points:
        for d in c.changed:
            if d.kind == VARIABLE:
                seen.setdefault(d.describe(), d)
            elif d.kind == CONTEXT:
                measured.setdefault(d.describe(), d)
    changed = Differences(tuple(seen.values()) + env_differences(old, new).items).summary()
    if measured:  # other seeds or more episodes: not a variable, but it says why no seed pairs
        changed += " (" + "; ".join(measured) + ")"
    return "; ".join(parts) or "no point pairs", changed


def history_rows(runs: list[HistoryRun], threshold: float) -> list[HistoryRow]:
    rows = []
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        result = run.result
        key = (run.kind, run.policy)
        previous = last.get(key)
        versus, changed = "-", "first run"
        if run.kind == "bench":
            figures = _bench_figures(result)
            if previous is not None:
                versus, changed = _bench_versus(previous, result, threshold)
        elif run.kind == "eval":
            figures = _eval_figures(result)
            if previous is not None:
                versus, changed = _eval_versus(previous, result)
        else:
            figures = _demo_figures(result)
            if previous is not None:
                from hotloop.measure.differences import differences, fingerprint_differences

                changed = differences(
                    [fingerprint_differences(previous.get("env") or {}, result.get("env") or {})]
                ).summary()
        last[key] = result
        rows.append(HistoryRow(run, figures, versus, changed))
    return rows


def history_table(rows: list[HistoryRow], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in ("#", "created", "kind", "target", "figures (95 % intervals)", "vs previous", "changed"):
        table.add_column(col, no_wrap=col in ("#", "created", "kind"), overflow="fold")
    for row in rows:
        r = row.run
        target = r.target if r.policy == r.target else f"{r.target} ({r.policy})"
        table.add_row(str(r.number), r.created, r.kind, target, row.figures, row.versus, row.changed)
    return table


def _bench_panel(ax: Any, series: dict[str, list[tuple[int, Interval, Interval]]]) -> None:
    for name, pts in series.items():
        xs = [n for n, _, _ in pts]
        for q, ivs, style in (("p50", [p[1] for p in pts], "-o"), ("p99", [p[2] for p in pts], "--s")):
            ys = [i.estimate for i in ivs]
            err = [[i.estimate - i.low for i in ivs], [i.high - i.estimate for i in ivs]]
            ax.errorbar(xs, ys, yerr=err, fmt=style, capsize=3, label=f"{name} {q}")
    values = [v for pts in series.values() for p in pts for v in (p[1].estimate, p[2].high) if v > 0]
    if values and max(values) > 20 * min(values):  # a stall next to a quiet run: keep both readable
        ax.set_yscale("log")
    ax.set_ylabel("total latency (ms)")
    ax.set_title("bench: p50 and p99 per run")


def _eval_panel(ax: Any, series: dict[str, list[tuple[int, float, float, float]]]) -> None:
    for name, pts in series.items():
        xs = [p[0] for p in pts]
        ys = [100 * p[1] for p in pts]
        err = [[100 * max(0.0, p[1] - p[2]) for p in pts], [100 * max(0.0, p[3] - p[1]) for p in pts]]
        ax.errorbar(xs, ys, yerr=err, fmt="-o", capsize=3, label=name)
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(-2, 102)
    ax.set_title("eval: success per run")


def plot_history(runs: list[HistoryRun], path: str | Path) -> Path:
    """p50 and p99 of each bench target's total over its runs (bootstrap 95 % bars), and each eval
    point's success rate over its runs (Wilson 95 % bars), against the run number."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from hotloop.closedloop.baseline import eval_runs, run_key
    from hotloop.io import atomic_write_figure
    from hotloop.measure.compare import quantile_interval

    bench: dict[str, list[tuple[int, Interval, Interval]]] = {}
    success: dict[str, list[tuple[int, float, float, float]]] = {}
    for run in runs:
        result = run.result
        if run.kind == "bench":
            samples = result.get("samples_ms") or []
            bench.setdefault(run.policy, []).append(
                (run.number, quantile_interval(samples, 0.5), quantile_interval(samples, 0.99))
            )
        elif run.kind == "eval":
            for r in eval_runs(result):
                lo, hi = r.get("success_ci95") or (0.0, 1.0)
                label = f"{run.policy} {run_key(r).label}"
                success.setdefault(label, []).append((run.number, float(r.get("success_rate", 0.0)), lo, hi))
    panels = int(bool(bench)) + int(bool(success))
    fig, axes = plt.subplots(1, max(1, panels), figsize=(6 * max(1, panels), 4), squeeze=False)
    free = list(axes[0])
    if bench:
        _bench_panel(free.pop(0), bench)
    if success:
        _eval_panel(free.pop(0), success)
    for ax in axes[0]:
        ax.set_xlabel("history run #")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return atomic_write_figure(path, fig, dpi=100)
