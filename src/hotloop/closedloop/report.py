"""`hotloop report OUT`: a sweep's table, JSON, plots and HTML page, rebuilt from its results store alone.

Nothing is re-run and nothing is taken from the executor: the cells come from OUT/sweep.json, the
episodes from OUT/episodes.jsonl, the cost figures from OUT/runs.jsonl. Written: OUT/results.json
({"runs": [...]} as `hotloop eval --json` writes, plus "missing" and "executions"), OUT/plots/*.png
(success against latency per strategy, one plot per group of cells that differ only in strategy,
trigger and latency) and OUT/report.html.
"""

from __future__ import annotations

import copy
import html
from collections import Counter
from pathlib import Path
from typing import Any

from hotloop.closedloop.eval_run import EvalRequest, assemble_run
from hotloop.closedloop.store import ROWS_FILE, read_rows, read_runs, read_spec

# Fields that tell the cells of one plot apart (the rest name the plot).
_PLOTTED = ("strategy", "trigger_remaining", "latency")


def build_runs(out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """(runs in cell order, the cells' descriptions, episodes missing from the store)."""
    spec = read_spec(out)
    by_cell: dict[str, dict[int, dict[str, Any]]] = {}
    for row in read_rows(out / ROWS_FILE):
        by_cell.setdefault(row["cell"], {})[int(row["seed"])] = row
    runs, missing = [], 0
    for cell in spec["cells"]:
        request = EvalRequest(**cell["request"])
        seeds = [request.seed + i for i in range(request.episodes)]
        rows = by_cell.get(cell["key"], {})
        got = [rows[s] for s in seeds if s in rows]
        missing += len(seeds) - len(got)
        records = [copy.deepcopy(r["record"]) for r in got]
        env = {"nodes": dict(Counter(str(r.get("node")) for r in got))}
        wall = sum(r.get("episode_s") or 0.0 for r in got)  # worker time spent in this cell's episodes
        run = assemble_run(request, records, len(got) < len(seeds), wall, None, env=env)
        run["cell"] = cell["key"]
        runs.append(run)
    return runs, spec["cells"], missing


def _group(run: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a plot's cells share: target and task first, then each option that is not at its default."""
    import dataclasses

    req = run["request"]
    defaults = {f.name: f.default for f in dataclasses.fields(EvalRequest)}
    first = [("target", req["target"]), ("task", req["task"])]
    rest = [
        (k, v)
        for k, v in sorted(req.items())
        if k not in (*_PLOTTED, "target", "task", "episodes", "seed", "workers") and v != defaults.get(k)
    ]
    return tuple(first + rest)


def _group_title(group: tuple[tuple[str, Any], ...]) -> str:
    return " ".join(f"{v}" if k in ("target", "task") else f"{k}={v}" for k, v in group)


def write_report(out: Path, print_tables: bool = True) -> dict[str, Any]:
    import re

    import typer

    from hotloop.closedloop.eval_run import plot_sweep, print_table
    from hotloop.io import atomic_write_json, atomic_write_text

    runs, cells, missing = build_runs(out)
    executions = read_runs(out)
    groups: dict[tuple[tuple[str, Any], ...], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(_group(run), []).append(run)
    plots: list[tuple[str, Path | None, list[dict[str, Any]]]] = []
    for stale in (out / "plots").glob("[0-9][0-9]-*.png"):  # an earlier report's, now rebuilt
        stale.unlink()
    for i, (group, members) in enumerate(groups.items()):
        title = _group_title(group)
        if print_tables:
            print_table(members, title=title)
        png = None
        if any(r["completed"] and r["latency"]["kind"] == "fixed" for r in members):
            slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")[:60] or "sweep"
            png = plot_sweep(members, out / "plots" / f"{i:02d}-{slug}.png", title=title)
        plots.append((title, png, members))
    results = {"runs": runs, "missing": missing, "executions": executions}
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "report.html", _html(out, plots, missing, executions))
    if missing:
        typer.echo(
            f"{missing} episode(s) of the sweep are not in the store yet: `hotloop sweep ... --resume`",
            err=True,
        )
    typer.echo(
        f"wrote {out / 'results.json'}, {out / 'report.html'}"
        + (f" and {sum(1 for p in plots if p[1])} plot(s)" if any(p[1] for p in plots) else "")
    )
    return results


def _html(
    out: Path,
    plots: list[tuple[str, Path | None, list[dict[str, Any]]]],
    missing: int,
    executions: list[dict[str, Any]],
) -> str:
    from hotloop.closedloop.eval_run import run_label, simulated_ms

    e = html.escape
    parts = [
        "<!doctype html><meta charset=utf-8><title>hotloop sweep</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style>",
        f"<h1>Closed-loop sweep: {sum(len(p[2]) for p in plots)} cells</h1>",
    ]
    if missing:
        parts.append(f"<p><b>{missing} episode(s) not run yet</b> (resume the sweep to run them).</p>")
    for title, png, members in plots:
        parts.append(
            f"<h2>{e(title)}</h2><table><tr><th>strategy</th><th>latency</th><th>simulated</th><th>success</th>"
            "<th>95% CI</th><th>errors</th><th>task time s</th></tr>"
        )
        for r in members:
            lo, hi = r["success_ci95"]
            tt = r["task_time_s"]
            task_time = "-" if tt["mean"] is None else f"{tt['mean']:.2f}"
            sim = simulated_ms(r)
            sim_text = "-" if sim is None else f"{sim:.3g} ms"
            parts.append(
                f"<tr><td>{e(run_label(r))}</td><td>{e(r['latency']['spec'])}</td><td>{sim_text}</td>"
                f"<td>{r['successes']}/{r['completed']}</td><td>{100 * lo:.0f}–{100 * hi:.0f}%</td>"
                f"<td>{r['errors']}</td><td>{task_time}</td></tr>"
            )
        parts.append("</table>")
        notes = [f"{run_label(r)}: {r['simulated_latency']['note']}" for r in members
                 if (r.get("simulated_latency") or {}).get("note")]  # fmt: skip
        parts.extend(f"<p>note: {e(n)}</p>" for n in notes)
        if png is not None:
            parts.append(f'<p><img src="{e(str(png.relative_to(out)))}" alt="{e(title)}"></p>')
    if executions:
        parts.append(
            "<h2>Executions</h2><table><tr><th>executor</th><th>workers</th><th>episodes</th><th>wall s</th>"
            "<th>episodes/s</th><th>overhead/episode s</th><th>per node</th></tr>"
        )
        for x in executions:
            nodes = ", ".join(f"{k}: {v}" for k, v in (x.get("per_node") or {}).items())
            parts.append(
                f"<tr><td>{e(str(x.get('executor')))}</td><td>{x.get('slots')}</td><td>{x.get('episodes')}</td>"
                f"<td>{x.get('wall_s')}</td><td>{x.get('episodes_per_s')}</td>"
                f"<td>{x.get('overhead_per_episode_s')}</td><td>{e(nodes)}</td></tr>"
            )
        parts.append("</table>")
    return "\n".join(parts) + "\n"
