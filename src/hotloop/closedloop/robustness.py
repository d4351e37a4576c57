"""The robustness table: success per perturbation, several plans side by side, so a reader sees which plan
breaks first and under what.

Each plan is one `hotloop eval --sweep-perturb` result (or the runs of one plan the demo's robustness rung
made): its points are the unperturbed run and one run per perturbation, on the same seeds. A cell holds
the successes with their Wilson 95 % interval and, for a perturbed point, the paired change against the
plan's own unperturbed point (McNemar's exact test on the seeds both ran): a plan "breaks" under a
perturbation when that change is significantly negative. Plans that ran different seeds or latencies
are refused: their cells would not be comparable.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError

NONE = "none"  # the unperturbed point's row


@dataclass(frozen=True)
class Plan:
    label: str
    runs: list[dict[str, Any]]  # eval runs (one per point)


def _perturb(run: dict[str, Any]) -> str:
    return (run.get("request") or {}).get("perturb") or NONE


def _seeds(run: dict[str, Any]) -> list[int]:
    return sorted(int(r["seed"]) for r in run["per_episode"])


def robustness_summary(plans: list[Plan]) -> dict[str, Any]:
    """{"plans", "latency", "episodes", "seeds", "success": {perturbation: {plan: cell}}} with a cell's
    successes, episodes, rate, Wilson interval, crashed episodes and, for a perturbed point, `vs_none`:
    the paired change against the plan's unperturbed point."""
    from hotloop.closedloop.baseline import compare_point

    if not plans:
        raise ConfigError("give at least one eval result")
    first = plans[0].runs[0]
    latency, seeds = str(first["latency"]["spec"]), _seeds(first)
    rows: dict[str, dict[str, Any]] = {}
    for plan in plans:
        points: dict[str, dict[str, Any]] = {}
        for run in plan.runs:
            name = _perturb(run)
            if name in points:
                raise ConfigError(
                    f"{plan.label} holds two points under {name}: give each perturbation once per plan, or "
                    "name the results apart with --label"
                )
            if str(run["latency"]["spec"]) != latency or _seeds(run) != seeds:
                raise ConfigError(
                    f"{plan.label} ({name}) ran latency {run['latency']['spec']} on {len(_seeds(run))} seeds, "
                    f"{plans[0].label} latency {latency} on seeds {seeds[0]}-{seeds[-1]}: run every plan with "
                    "the same --latency, --seed and --episodes"
                )
            points[name] = run
        base = points.get(NONE)
        for name, run in points.items():
            cell = {
                "target": run["target"],
                "episodes": run["episodes"],
                "successes": run["successes"],
                "success_rate": run["success_rate"],
                "success_ci95": run["success_ci95"],
                "errors": run["errors"],
                "vs_none": None,
            }
            if base is not None and name != NONE:
                paired = compare_point(base, run).paired
                cell["vs_none"] = paired.to_dict()
            rows.setdefault(name, {})[plan.label] = cell
    ordered = {NONE: rows.pop(NONE)} if NONE in rows else {}
    ordered.update(rows)
    return {
        "plans": [p.label for p in plans],
        "latency": latency,
        "episodes": len(seeds),
        "seeds": [seeds[0], seeds[-1]],
        "success": ordered,
    }


def cell_text(cell: dict[str, Any] | None) -> str:
    """`successes/episodes (lo-hi %)`, with the paired change against unperturbed and its p value."""
    if cell is None:
        return "-"
    lo, hi = cell["success_ci95"]
    text = f"{cell['successes']}/{cell['episodes']} ({100 * lo:.0f}–{100 * hi:.0f} %)"
    vs = cell.get("vs_none")
    if vs is not None and vs.get("pairs"):
        d = vs["difference"]
        text += f", {100 * d['estimate']:+.0f} pts (p = {vs['mcnemar_p']:.2g})"
    if cell["errors"]:
        text += f", {cell['errors']} crashed"
    return text


def print_robustness(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"success per perturbation, sync {summary['latency']}, seeds {summary['seeds'][0]}–"
        f"{summary['seeds'][1]} at every point (Wilson 95 %; change against the plan's unperturbed point, "
        "paired, McNemar exact p)"
    )
    table.add_column("perturbation")
    for plan in summary["plans"]:
        table.add_column(plan)
    for name, cells in summary["success"].items():
        table.add_row(name, *(cell_text(cells.get(plan)) for plan in summary["plans"]))
    Console(width=max(160, Console().width)).print(table)


def markdown_robustness(summary: dict[str, Any]) -> str:
    """The table as markdown (for docs)."""
    head = "| perturbation | " + " | ".join(summary["plans"]) + " |"
    rule = "|---" * (1 + len(summary["plans"])) + "|"
    rows = [
        f"| `{name}` | " + " | ".join(cell_text(cells.get(p)) for p in summary["plans"]) + " |"
        for name, cells in summary["success"].items()
    ]
    return "\n".join([head, rule, *rows])


def plot_robustness(summary: dict[str, Any], path: Path, task: str = "conveyor-pick") -> Path:
    """Success per perturbation (rows of the table), one bar per plan, Wilson 95 % intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(summary["success"])
    plans = summary["plans"]
    x = np.arange(len(names))
    width = 0.8 / len(plans)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names)), 3.6))
    for i, plan in enumerate(plans):
        cells = [summary["success"][n].get(plan) for n in names]
        rate = np.array([c["success_rate"] if c else np.nan for c in cells])
        lo = np.array([c["success_ci95"][0] if c else np.nan for c in cells])
        hi = np.array([c["success_ci95"][1] if c else np.nan for c in cells])
        ax.bar(x + (i - (len(plans) - 1) / 2) * width, rate, width, label=plan)
        ax.errorbar(
            x + (i - (len(plans) - 1) / 2) * width, rate, yerr=[rate - lo, hi - rate], fmt="none", ecolor="k"
        )
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylabel("success")
    ax.set_ylim(0, 1)
    ax.set_title(f"{task}, sync {summary['latency']}, {summary['episodes']} episodes a point")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def html_robustness(summary: dict[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(p)}</th>" for p in summary["plans"])
    rows = []
    for name, cells in summary["success"].items():
        tds = "".join(f"<td>{html.escape(cell_text(cells.get(plan)))}</td>" for plan in summary["plans"])
        rows.append(f"<tr><td>{html.escape(name)}</td>{tds}</tr>")
    return (
        f"<p>Success on conveyor-pick (medium), sync at a simulated {summary['latency'].split(':')[1]} ms, "
        f"seeds {summary['seeds'][0]}–{summary['seeds'][1]} at every point (paired); brackets: Wilson 95 % "
        "interval; then the change against the plan's own unperturbed point (paired, McNemar exact p). "
        "Perturbations: <code>hotloop eval --perturb</code> (docs/perception.md).</p>"
        f"<table><tr><th>perturbation</th>{head}</tr>{''.join(rows)}</table>"
    )
