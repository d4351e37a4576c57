"""The closed-loop rung of `hotloop demo`: what latency costs `demo:conveyor`, and what the real-time
layer (`hotloop.realtime`) wins back: sync, async and RTC side by side.

Default (about a minute on 2 idle cores): latencies 0, 200, 300 ms (fixed, simulated) × {sync, async,
rtc, rtc-soft} × 15 episodes per point, except sync at 0 ms, which gets 20 (the headline number). `full=True`:
0, 50, 100, 200, 300 ms × 100 episodes per point. Seeds are 0..N-1 at every point, so each point sees
the same belt speeds and start positions. Besides success, each point reports the chunk-boundary jump
(how far a new chunk's first command lands from what the replaced plan would have commanded) and the
jerk of the end effector: RTC's reason to exist is to make the first small without costing the second.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

TARGET = "demo:conveyor"
TASK = "conveyor-pick"
STRATEGIES = ("sync", "async", "rtc", "rtc-soft")
RTC_STRATEGIES = ("rtc", "rtc-soft")


def rung_plan(full: bool) -> tuple[list[float], int, int]:
    """(latencies in ms, episodes per point, episodes at sync 0 ms)."""
    if full:
        return [0.0, 50.0, 100.0, 200.0, 300.0], 100, 100
    return [0.0, 200.0, 300.0], 15, 20


def run_rung(out_dir: Path, full: bool, progress: bool = True, workers: int = 2) -> dict[str, Any]:
    from hotloop.closedloop.eval_run import EvalRequest, plot_sweep, run_eval
    from hotloop.io import atomic_write_json

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    latencies, per_point, at_zero = rung_plan(full)
    runs: list[dict[str, Any]] = []
    for strategy in STRATEGIES:
        for ms in latencies:
            n = at_zero if (strategy == "sync" and ms == 0) else per_point
            request = EvalRequest(
                target=TARGET,
                task=TASK,
                strategy=strategy,
                latency=f"fixed:{ms:g}",
                episodes=n,
                workers=workers,
            )
            runs.append(run_eval(request, progress=progress))
    atomic_write_json(out_dir / "closed_loop.json", {"runs": runs})
    plot = plot_sweep(runs, out_dir / "closed_loop.png", title=f"{TARGET}: success against latency")
    smooth = plot_smoothness(runs, out_dir / "closed_loop_smoothness.png")

    table: dict[str, dict[str, Any]] = {}
    for r in runs:
        table.setdefault(r["strategy"]["name"], {})[f"{r['latency']['ms']:g}"] = {
            "episodes": r["episodes"],
            "success_rate": r["success_rate"],
            "success_ci95": r["success_ci95"],
            "task_time_s": r["task_time_s"],
            "jerk": r["jerk"],
            "chunk_discontinuity": r["chunk_discontinuity"],
            "chunk_jump_per_s": r.get("chunk_jump_per_s"),
            "errors": r["errors"],
        }
    zero = table["sync"]["0"]["success_rate"]
    sync200 = table["sync"].get("200", {}).get("success_rate")
    async200 = table["async"].get("200", {}).get("success_rate")
    recovered = None
    if sync200 is not None and async200 is not None and zero > sync200:
        recovered = (async200 - sync200) / (zero - sync200)
    jump_ratio: dict[str, dict[str, float | None]] = {}  # per RTC mode, per latency: its jump / async's
    for name in RTC_STRATEGIES:
        jump_ratio[name] = {}
        for ms in latencies:
            a = table["async"].get(f"{ms:g}", {}).get("chunk_discontinuity")
            r = table[name].get(f"{ms:g}", {}).get("chunk_discontinuity")
            jump_ratio[name][f"{ms:g}"] = r / a if a and r is not None else None
    summary = {
        "target": TARGET,
        "task": TASK,
        "plan": {"latencies_ms": latencies, "episodes_per_point": per_point, "episodes_sync_0ms": at_zero},
        "success": table,
        "sync_0ms": table["sync"]["0"],
        "loss_at_200ms_sync": None if sync200 is None else zero - sync200,
        "async_recovers_fraction_at_200ms": recovered,
        "jump_over_async": jump_ratio,
        "wall_s": round(sum(r["wall_s"] for r in runs), 1),
        "results_json": "closed_loop.json",
    }
    return {
        "title": f"Closed loop and real-time execution: {TARGET} on {TASK}, sync / async / rtc / rtc-soft",
        "summary": summary,
        "plots": [plot, smooth],
        "html": _html(table, latencies),
    }


def plot_smoothness(runs: list[dict[str, Any]], path: str | Path) -> Path:
    """Chunk-boundary jump (mm) and jerk (m/s³) against latency, one line per strategy."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hotloop.io import atomic_write_figure

    fig, (ax_jump, ax_jerk) = plt.subplots(1, 2, figsize=(10, 4))
    by: dict[str, list[tuple[float, float | None, float | None]]] = {}
    for r in runs:
        jump = r["chunk_discontinuity"]
        by.setdefault(r["strategy"]["name"], []).append(
            (float(r["latency"]["ms"]), None if jump is None else 1e3 * jump, r["jerk"])
        )
    for name, pts in by.items():
        pts.sort()
        jumps = [(x, y) for x, y, _ in pts if y is not None]
        jerks = [(x, j) for x, _, j in pts if j is not None]
        if jumps:
            ax_jump.plot(*zip(*jumps, strict=True), marker="o", label=name)
        if jerks:
            ax_jerk.plot(*zip(*jerks, strict=True), marker="o", label=name)
    ax_jump.set_ylabel("chunk-boundary jump (mm, mean)")
    ax_jerk.set_ylabel("end-effector jerk (m/s³, RMS)")
    for ax in (ax_jump, ax_jerk):
        ax.set_xlabel("inference latency (ms, simulated)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{TARGET}: smoothness against latency")
    fig.tight_layout()
    return atomic_write_figure(path, fig, dpi=100)


def _html(table: dict[str, dict[str, Any]], latencies: list[float]) -> str:
    head = "".join(f"<th>{ms:g} ms</th>" for ms in latencies)

    def rows(cell: Any) -> str:
        out = []
        for strategy, points in table.items():
            cells = "".join(cell(points.get(f"{ms:g}")) for ms in latencies)
            out.append(f"<tr><td>{html.escape(strategy)}</td>{cells}</tr>")
        return "".join(out)

    def success(p: dict[str, Any] | None) -> str:
        if p is None:
            return "<td>-</td>"
        lo, hi = p["success_ci95"]
        return (
            f"<td>{100 * p['success_rate']:.0f}% <small>({100 * lo:.0f}–{100 * hi:.0f}, "
            f"n={p['episodes']})</small></td>"
        )

    def smoothness(p: dict[str, Any] | None) -> str:
        if p is None:
            return "<td>-</td>"
        jump = "-" if p["chunk_discontinuity"] is None else f"{1e3 * p['chunk_discontinuity']:.1f} mm"
        rate = p.get("chunk_jump_per_s")
        per_s = "-" if rate is None else f"{1e3 * rate:.1f} mm/s"
        jerk = "-" if p["jerk"] is None else f"{p['jerk']:.0f}"
        return f"<td>{jump} <small>({per_s}) / {jerk} m/s³</small></td>"

    return (
        "<p>Success rate of the shipped pi0.5-nano policy on conveyor-pick (medium belt speed) while "
        "simulated time advances during each inference. <b>sync</b> holds the robot and replans every "
        "control period; <b>async</b> keeps executing and splices the next chunk by time; <b>rtc</b> also "
        "inpaints the next chunk onto the one being executed (real-time chunking, guided); <b>rtc-soft</b> "
        "starts the next chunk from the executing one along RTC's soft mask and replans continuously. "
        "Brackets: Wilson 95% interval.</p>"
        f"<table><tr><th>strategy</th>{head}</tr>{rows(success)}</table>"
        "<p>Chunk-boundary jump (mean distance between a new chunk's first command and what the "
        "replaced plan would have commanded; in brackets, the jumps summed per second of motion, which "
        "does not flatter a strategy that replans often) / end-effector jerk (RMS):</p>"
        f"<table><tr><th>strategy</th>{head}</tr>{rows(smoothness)}</table>"
    )
