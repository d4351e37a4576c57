"""The robustness rung of `hotloop demo` (under `--full`, or `--rung robustness`): closed-loop success on
conveyor-pick under named perturbations (`hotloop.sim.perturb`), several plans side by side, so a reader
sees which plan breaks first and under what.

Plans: `demo:conveyor-vision` (the policy that sees the box only through the camera) and `demo:conveyor`
behind the layered chain with the learned detector (`--pipeline detector:model=learned`), both sync at
a simulated 50 ms. Points: unperturbed, then one perturbation each: the scene (lighting, a bumped camera,
distractor objects, an occluder, a bigger box) and the sensor (pixel noise, blur). Every point runs the
same seeds, so the cells of a row are paired. Default: 10 episodes a point; `full=True`: 50.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASK = "conveyor-pick"
LATENCY = "fixed:50"
SEED = 2000  # away from training (10000..) and the detector's held-out seeds (50000..)
WORKERS = 2  # evaluation worker processes per point


@dataclass(frozen=True)
class Plan:
    label: str
    target: str
    pipeline: str | None = None


PLANS = (
    Plan("demo:conveyor-vision", "demo:conveyor-vision"),
    Plan("demo:conveyor + learned detector", "demo:conveyor", "detector:model=learned"),
)
PERTURBATIONS = (
    "lighting:0.5",
    "camera-shift:0.02",
    "distractors:3",
    "occlusion:0.08",
    "box-size:1.25",
    "image-noise:0.05",
    "blur:1",
)


def rung_episodes(full: bool) -> int:
    return 50 if full else 10


def run_rung(out_dir: Path, full: bool, progress: bool = True, workers: int | None = None) -> dict[str, Any]:
    from hotloop.closedloop.eval_run import EvalRequest, run_eval
    from hotloop.io import atomic_write_json
    from hotloop.sim.perturb import parse_perturb

    for spec in PERTURBATIONS:  # a typo fails before the first episode
        parse_perturb(spec)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    episodes = rung_episodes(full)
    points: list[str | None] = [None, *PERTURBATIONS]
    runs: list[dict[str, Any]] = []
    table: dict[str, dict[str, Any]] = {}
    for plan in PLANS:
        for perturb in points:
            run = run_eval(
                EvalRequest(
                    target=plan.target,
                    task=TASK,
                    strategy="sync",
                    latency=LATENCY,
                    episodes=episodes,
                    seed=SEED,
                    workers=WORKERS if workers is None else workers,
                    pipeline=plan.pipeline,
                    perturb=perturb,
                ),
                progress=progress,
            )
            runs.append({**run, "plan": plan.label})
            table.setdefault(perturb or "none", {})[plan.label] = {
                "episodes": run["episodes"],
                "successes": run["successes"],
                "success_rate": run["success_rate"],
                "success_ci95": run["success_ci95"],
                "errors": run["errors"],
            }
    atomic_write_json(out_dir / "robustness.json", {"runs": runs})
    summary = {
        "latency": LATENCY,
        "episodes": episodes,
        "seeds": [SEED, SEED + episodes - 1],
        "plans": [p.label for p in PLANS],
        "success": table,
    }
    plot = plot_robustness(summary, out_dir / "robustness.png")
    return {
        "title": "Robustness: conveyor-pick under perturbations, plans side by side",
        "summary": summary,
        "plots": [str(plot)],
        "html": _html(summary),
    }


def plot_robustness(summary: dict[str, Any], path: Path) -> Path:
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
    ax.set_title(f"conveyor-pick, sync {summary['latency']}, {summary['episodes']} episodes a point")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _html(summary: dict[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(p)}</th>" for p in summary["plans"])
    rows = []
    for name, cells in summary["success"].items():
        tds = []
        for plan in summary["plans"]:
            c = cells.get(plan)
            if c is None:
                tds.append("<td>-</td>")
                continue
            lo, hi = c["success_ci95"]
            crashed = f" <b>{c['errors']} crashed</b>" if c["errors"] else ""
            tds.append(
                f"<td>{c['successes']}/{c['episodes']} <small>({100 * lo:.0f}–{100 * hi:.0f} %)</small>"
                f"{crashed}</td>"
            )
        rows.append(f"<tr><td>{html.escape(name)}</td>{''.join(tds)}</tr>")
    return (
        f"<p>Success on conveyor-pick (medium), sync at a simulated {summary['latency'].split(':')[1]} ms, "
        f"seeds {summary['seeds'][0]}–{summary['seeds'][1]} at every point (paired); brackets: Wilson 95 % "
        "interval. Perturbations: <code>hotloop eval --perturb</code> (docs/perception.md).</p>"
        f"<table><tr><th>perturbation</th>{head}</tr>{''.join(rows)}</table>"
    )
