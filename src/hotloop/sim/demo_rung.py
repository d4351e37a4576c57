"""The closed-loop rung of `hotloop demo`: what latency costs `demo:conveyor`, sync against async.

Default (about 1.5 minutes on 2 cores): latencies 0, 100, 200, 300 ms (fixed, simulated) × {sync,
async} × 30 episodes per point, except sync at 0 ms, which gets 50 (the headline number). `full=True`:
0, 50, 100, 200, 300 ms × 100 episodes per point. Seeds are 0..N-1 at every point, so each point sees the
same belt speeds and start positions.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

TARGET = "demo:conveyor"
TASK = "conveyor-pick"


def rung_plan(full: bool) -> tuple[list[float], int, int]:
    """(latencies in ms, episodes per point, episodes at sync 0 ms)."""
    if full:
        return [0.0, 50.0, 100.0, 200.0, 300.0], 100, 100
    return [0.0, 100.0, 200.0, 300.0], 30, 50


def run_rung(out_dir: Path, full: bool, progress: bool = True, workers: int = 2) -> dict[str, Any]:
    from hotloop.io import atomic_write_json
    from hotloop.sim.eval_run import EvalRequest, plot_sweep, run_eval

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    latencies, per_point, at_zero = rung_plan(full)
    runs: list[dict[str, Any]] = []
    for strategy in ("sync", "async"):
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

    table: dict[str, dict[str, Any]] = {}
    for r in runs:
        table.setdefault(r["strategy"]["name"], {})[f"{r['latency']['ms']:g}"] = {
            "episodes": r["episodes"],
            "success_rate": r["success_rate"],
            "success_ci95": r["success_ci95"],
            "task_time_s": r["task_time_s"],
            "jerk": r["jerk"],
            "chunk_discontinuity": r["chunk_discontinuity"],
            "errors": r["errors"],
        }
    zero = table["sync"]["0"]["success_rate"]
    sync200 = table["sync"].get("200", {}).get("success_rate")
    async200 = table["async"].get("200", {}).get("success_rate")
    recovered = None
    if sync200 is not None and async200 is not None and zero > sync200:
        recovered = (async200 - sync200) / (zero - sync200)
    summary = {
        "target": TARGET,
        "task": TASK,
        "plan": {"latencies_ms": latencies, "episodes_per_point": per_point, "episodes_sync_0ms": at_zero},
        "success": table,
        "sync_0ms": table["sync"]["0"],
        "loss_at_200ms_sync": None if sync200 is None else zero - sync200,
        "async_recovers_fraction_at_200ms": recovered,
        "wall_s": round(sum(r["wall_s"] for r in runs), 1),
        "results_json": "closed_loop.json",
    }
    return {
        "title": f"Closed loop: {TARGET} on {TASK}, sync vs async",
        "summary": summary,
        "plots": [plot],
        "html": _html(table, latencies),
    }


def _html(table: dict[str, dict[str, Any]], latencies: list[float]) -> str:
    head = "".join(f"<th>{ms:g} ms</th>" for ms in latencies)
    rows = []
    for strategy, points in table.items():
        cells = []
        for ms in latencies:
            p = points.get(f"{ms:g}")
            if p is None:
                cells.append("<td>-</td>")
                continue
            lo, hi = p["success_ci95"]
            cells.append(
                f"<td>{100 * p['success_rate']:.0f}% <small>({100 * lo:.0f}–{100 * hi:.0f}, "
                f"n={p['episodes']})</small></td>"
            )
        rows.append(f"<tr><td>{html.escape(strategy)}</td>{''.join(cells)}</tr>")
    return (
        "<p>Success rate of the shipped pi0.5-nano policy on conveyor-pick (medium belt speed) while "
        "simulated time advances during each inference. <b>sync</b> holds the robot and replans every "
        "control period; <b>async</b> keeps executing and splices the next chunk by time. Brackets: "
        "Wilson 95% interval.</p>"
        f"<table><tr><th>strategy</th>{head}</tr>{''.join(rows)}</table>"
    )
