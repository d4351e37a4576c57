"""The families rung of `hotloop demo` (under `--full`, or `--rung families`): the demo policies shipped as
LeRobot checkpoints, `demo:conveyor-act`, `demo:conveyor-diffusion` and `demo:conveyor-smolvla`, in closed loop.

Per policy: success against simulated latency for each way LeRobot (or hotloop) can execute it — `sync`
(replan every control period), `chunk` (hold while inferring, then execute the policy's default steps:
ACT's n_action_steps, as LeRobot's queue; half of Diffusion's and SmolVLA's, docs/smolvla.md), `async`
(the next chunk computed while the robot moves), for ACT `ensemble` (temporal ensembling, one
inference per control period) and for SmolVLA `rtc` (LeRobot's own real-time chunking) — and its
compressed plan (`hotloop compress`) judged in closed loop beside its reference on the same seeds:
ACT int8 + compile, Diffusion DDIM 25 + compile against its 100 DDPM steps (DDIM 10 lost 16 points of
success on 200 seeds, DDIM 25 none: docs/diffusion.md), SmolVLA 5 flow steps of its 10 + int8 + compile
(200/200 against its fp32 self's 198/200 on 200 fresh seeds at 0 ms: docs/smolvla.md).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASK = "conveyor-pick"


@dataclass(frozen=True)
class FamilyDemo:
    target: str
    strategies: tuple[str, ...]
    recipe: str  # the compressed plan judged in closed loop
    judge_strategy: str  # how the compressed plan's closed-loop runs execute (where the reference succeeds)
    # The action cosine a rung must keep to continue. Loose on purpose: the rung reports the cosine and
    # the success kept. A DDPM policy's chunks are stochastic: demo:conveyor-diffusion's DDPM 100 agrees
    # with itself under another draw of step noise at cos 0.81, and DDIM's deterministic chunks at 0.45
    # (grip commands of +-1 at different steps), so for it the closed loop is the judge.
    min_cos: float

    def recipe_steps(self) -> Any:
        """The recipe parsed with the family's own steps (Diffusion's `ddim:N`)."""
        from hotloop.compress.recipe import family_recipe_steps, parse_recipe

        return parse_recipe(self.recipe, family_recipe_steps(self.target))


DEMOS = (
    FamilyDemo("demo:conveyor-act", ("sync", "chunk", "async", "ensemble"), "quantize,compile", "sync", 0.9),
    FamilyDemo("demo:conveyor-diffusion", ("chunk", "async"), "ddim:25,compile", "chunk", 0.3),
    FamilyDemo(
        "demo:conveyor-smolvla", ("sync", "chunk", "async", "rtc"), "steps:5,quantize,compile", "chunk", 0.9
    ),
)


@dataclass(frozen=True)
class FamiliesPlan:
    latencies_ms: tuple[float, ...]
    episodes: int  # per (strategy, latency) point
    recipe_episodes: int  # per compression rung (reference and each step), sync at 0 ms
    bench_iters: int
    workers: int = 2  # closed-loop worker processes (0: in this process, no start-up per run)


def rung_plan(full: bool) -> FamiliesPlan:
    if full:
        return FamiliesPlan((0.0, 100.0, 200.0, 300.0), 50, 100, 30)
    return FamiliesPlan((0.0, 200.0), 10, 10, 5)


def run_rung(out_dir: Path, full: bool, progress: bool = True) -> dict[str, Any]:
    from hotloop.closedloop.eval_run import EvalRequest, plot_sweep, run_eval
    from hotloop.io import atomic_write_json

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = rung_plan(full)
    summary: dict[str, Any] = {
        "plan": plan.__dict__ | {"latencies_ms": list(plan.latencies_ms)},
        "policies": {},
    }
    plots: list[str] = []
    sections: list[str] = []
    for demo in DEMOS:
        stem = demo.target.replace(":", "_")
        runs = [
            run_eval(
                EvalRequest(
                    target=demo.target,
                    task=TASK,
                    strategy=strategy,
                    latency=f"fixed:{ms:g}",
                    episodes=plan.episodes,
                    workers=plan.workers,
                ),
                progress=progress,
            )
            for strategy in demo.strategies
            for ms in plan.latencies_ms
        ]
        atomic_write_json(out_dir / f"{stem}_closed_loop.json", {"runs": runs})
        plots.append(
            str(
                plot_sweep(
                    runs, out_dir / f"{stem}_closed_loop.png", title=f"{demo.target}: success against latency"
                )
            )
        )
        table: dict[str, dict[str, Any]] = {r["strategy"]["name"]: {} for r in runs}
        for r in runs:
            table[r["strategy"]["name"]][f"{r['latency']['ms']:g}"] = {
                "episodes": r["episodes"],
                "success_rate": r["success_rate"],
                "success_ci95": r["success_ci95"],
                "errors": r["errors"],
            }
        compression = _compression(demo, out_dir / f"{stem}_compressed", plan, progress)
        summary["policies"][demo.target] = {"success": table, "compression": compression}
        sections.append(_html(demo, table, plan, compression))
    atomic_write_json(out_dir / "families.json", summary)
    return {
        "title": f"LeRobot families: {', '.join(d.target for d in DEMOS)} in closed loop",
        "summary": summary,
        "plots": plots,
        "html": "".join(sections),
    }


def _compression(demo: FamilyDemo, out: Path, plan: FamiliesPlan, progress: bool) -> dict[str, Any]:
    """The compress recipe with a closed-loop judgement of every rung (reference first)."""
    from hotloop.compile.validate import Tolerance
    from hotloop.compress.recipe import RecipeConfig, run_recipe
    from hotloop.demo.compression_rung import recipe_summary

    report = run_recipe(
        RecipeConfig(
            target=demo.target,
            recipe=demo.recipe_steps(),
            eval_strategy=demo.judge_strategy,
            tolerance=Tolerance(cos=demo.min_cos),
            out=out,
            episodes=plan.recipe_episodes,
            workers=plan.workers,
            calibration_frames=8,
            eval_observations=8,
            bench_iters=plan.bench_iters,
            backends=("eager", "onnxruntime", "openvino"),
            progress=progress,
        )
    )
    return recipe_summary(report)


def _html(demo: FamilyDemo, table: dict[str, Any], plan: FamiliesPlan, compression: dict[str, Any]) -> str:
    head = "".join(f"<th>{ms:g} ms</th>" for ms in plan.latencies_ms)
    rows = []
    for strategy, points in table.items():
        cells = []
        for ms in plan.latencies_ms:
            p = points.get(f"{ms:g}")
            if p is None:
                cells.append("<td>-</td>")
                continue
            lo, hi = p["success_ci95"]
            crashed = f" <b>{p['errors']} crashed</b>" if p["errors"] else ""
            cells.append(
                f"<td>{100 * p['success_rate']:.0f}% <small>({100 * lo:.0f}–{100 * hi:.0f}, "
                f"n={p['episodes']})</small>{crashed}</td>"
            )
        rows.append(f"<tr><td>{html.escape(strategy)}</td>{''.join(cells)}</tr>")
    steps = []
    for r in compression["rungs"]:
        ci = r["success_ci95"]
        success = (
            f"{100 * r['success_rate']:.0f}% ({100 * ci[0]:.0f}–{100 * ci[1]:.0f}, n={r['episodes']})"
            if ci
            else "-"
        )
        steps.append(
            f"<tr><td>{html.escape(r['step'])}</td><td>{r['num_steps']}</td><td>{r['p50_ms']:.1f}</td>"
            f"<td>{r['p99_ms']:.1f}</td><td>{r['speedup_p50']:.2f}x</td><td>{r['action_cos']:.4f}</td>"
            f"<td>{success}</td></tr>"
        )
    stopped = f"<p class='err'>{html.escape(compression['stopped'])}</p>" if compression["stopped"] else ""
    return (
        f"<h3>{html.escape(demo.target)}</h3>"
        "<p>Success on conveyor-pick (medium) while simulated time advances during each inference; "
        "brackets: Wilson 95% interval.</p>"
        f"<table><tr><th>strategy</th>{head}</tr>{''.join(rows)}</table>"
        f"<p>Compressed plan <code>{html.escape(','.join(compression['recipe']))}</code>, each rung a written "
        f"artifact judged closed loop ({demo.judge_strategy}, 0 ms) on the same seeds as the reference:</p>"
        f"{stopped}<table><tr><th>rung</th><th>steps</th><th>p50 ms</th><th>p99 ms</th><th>speedup p50</th>"
        f"<th>action cos</th><th>success</th></tr>{''.join(steps)}</table>"
    )
