"""The compression rung of `hotloop demo`: the ladder reference -> fewer steps -> quantization -> compile
on `demo:conveyor`, each rung a real artifact with its latency, action error and closed-loop success.

Default (short): 4 steps, 8 episodes per rung, 10 timed inferences, eager + ONNX Runtime. `full=True`:
100 episodes per rung, 50 timed inferences, and OpenVINO among the backends.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

TARGET = "demo:conveyor"
RECIPE = "steps:4,quantize,compile"


def run_compression_rung(out_dir: Path, full: bool, progress: bool = True) -> dict[str, Any]:
    from hotloop.compile.validate import Tolerance
    from hotloop.compress.recipe import RecipeConfig, parse_recipe, plot_recipe, run_recipe
    from hotloop.io import atomic_write_json

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = RecipeConfig(
        target=TARGET,
        recipe=parse_recipe(RECIPE),
        # Loose on purpose: the rung shows what each rung costs; the table reports the cosine itself.
        tolerance=Tolerance(cos=0.9),
        out=out_dir / "compressed_demo_conveyor",
        episodes=100 if full else 8,
        calibration_frames=8,
        eval_observations=8,
        bench_iters=50 if full else 10,
        backends=("eager", "onnxruntime", "openvino") if full else ("eager", "onnxruntime"),
        progress=progress,
    )
    report = run_recipe(config)
    atomic_write_json(out_dir / "compression.json", report)
    plot = plot_recipe(report, out_dir / "compression.png")
    summary = {"artifact": report["artifact"], **recipe_summary(report)}
    return {
        "title": f"Compression ladder: {TARGET}, reference -> fewer steps -> quantization -> compile",
        "summary": summary,
        "plots": [str(plot)],
        "html": _html(summary, report),
    }


def recipe_summary(report: dict[str, Any]) -> dict[str, Any]:
    """A `run_recipe` report's figures per rung (reference first): latency, speed-up over the reference,
    action cosine and the closed-loop success where it was judged."""
    rows = report["rows"]
    ref = rows[0]["latency_ms"]["p50"]
    return {
        "recipe": report["recipe"],
        "stopped": report["stopped"],
        "rungs": [
            {
                "step": r["step"],
                "num_steps": r["num_steps"],
                "p50_ms": r["latency_ms"]["p50"],
                "p99_ms": r["latency_ms"]["p99"],
                "speedup_p50": ref / r["latency_ms"]["p50"] if r["latency_ms"]["p50"] else None,
                "action_cos": r["action"]["cosine"],
                "success_rate": r.get("success", {}).get("success_rate"),
                "success_ci95": r.get("success", {}).get("success_ci95"),
                "episodes": r.get("success", {}).get("episodes"),
            }
            for r in rows
        ],
    }


def _html(summary: dict[str, Any], report: dict[str, Any]) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("rung", "steps", "p50 ms", "p99 ms", "speedup p50", "action cos", "success", "plan")
    )
    body = []
    for s, r in zip(summary["rungs"], report["rows"], strict=True):
        ci = s["success_ci95"]
        success = f"{s['success_rate']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] n={s['episodes']}" if ci else ""
        plan = ", ".join(f"{k}: {v['backend']} {v['precision']}" for k, v in r["precision_plan"].items())
        body.append(
            f"<tr><td>{html.escape(s['step'])}</td><td>{s['num_steps']}</td><td>{s['p50_ms']:.2f}</td>"
            f"<td>{s['p99_ms']:.2f}</td><td>{s['speedup_p50']:.2f}x</td><td>{s['action_cos']:.5f}</td>"
            f"<td>{success}</td><td>{html.escape(plan)}</td></tr>"
        )
    note = f"<p class='err'>{html.escape(summary['stopped'])}</p>" if summary["stopped"] else ""
    return (
        f"<p>recipe {html.escape(','.join(summary['recipe']))}; each rung is a written artifact, timed with "
        "the bench harness and run closed loop through <code>hotloop eval</code> (sync, 0 ms).</p>"
        f"{note}<table><tr>{head}</tr>{''.join(body)}</table>"
    )
