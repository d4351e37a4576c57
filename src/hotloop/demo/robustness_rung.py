"""The robustness rung of `hotloop demo` (under `--full`, or `--rung robustness`): closed-loop success on
conveyor-pick under named perturbations (`hotloop.sim.perturb`), several plans side by side, so a reader
sees which plan breaks first and under what.

Plans: `demo:conveyor-vision` (the policy that sees the box only through the camera) and
`demo:conveyor-chain` (trained for an estimated box state) behind the layered chain with the learned
detector (`--pipeline detector:model=learned`), both sync at
a simulated 50 ms. Points: unperturbed, then one perturbation each: the scene (lighting, a bumped camera,
distractor objects, an occluder, a bigger box) and the sensor (pixel noise, blur). Every point runs the
same seeds, so the cells of a row are paired. Default: 10 episodes a point; `full=True`: 50.
"""

from __future__ import annotations

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
    Plan("demo:conveyor-chain + learned detector", "demo:conveyor-chain", "detector:model=learned"),
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
    from hotloop.closedloop.robustness import Plan as RunsOfPlan
    from hotloop.closedloop.robustness import html_robustness, plot_robustness, robustness_summary
    from hotloop.io import atomic_write_json
    from hotloop.sim.perturb import parse_perturb

    for spec in PERTURBATIONS:  # a typo fails before the first episode
        parse_perturb(spec)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    episodes = rung_episodes(full)
    points: list[str | None] = [None, *PERTURBATIONS]
    runs: list[dict[str, Any]] = []
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
    atomic_write_json(out_dir / "robustness.json", {"runs": runs})
    summary = robustness_summary(
        [RunsOfPlan(plan.label, [r for r in runs if r["plan"] == plan.label]) for plan in PLANS]
    )
    plot = plot_robustness(summary, out_dir / "robustness.png")
    return {
        "title": "Robustness: conveyor-pick under perturbations, plans side by side",
        "summary": summary,
        "plots": [str(plot)],
        "html": html_robustness(summary),
    }
