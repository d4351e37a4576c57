"""The compile rung of `hotloop demo`: a VLA target planned, compiled and benched against its fp32 eager
reference (candidate table, speedup, roofline shares), and the compiled `demo:conveyor` in closed loop
beside the reference.

Default (a minute or two on 2 cores): only `demo:conveyor` (a pi0.5-nano) is compiled, over eager,
ONNX Runtime and OpenVINO in fp32 with the plain recipe, and each policy runs 20 episodes at 0 ms.
`full=True`: `pi05:small` over eager, inductor, ONNX Runtime and OpenVINO, fp32 and bf16, both
recipes, prompt buckets 32/64/128, benched at 20 real prompt tokens; then `demo:conveyor` compiled with
the same candidates (no buckets) and 100 episodes each.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEMO = "demo:conveyor"


@dataclass(frozen=True)
class CompileRungPlan:
    vla_target: str
    backends: tuple[str, ...]
    precisions: tuple[str, ...]
    variants: tuple[str, ...]
    buckets: tuple[int, ...]
    prompt_tokens: int | None
    iterations: int
    bench_iterations: int
    episodes: int


def rung_plan(full: bool) -> CompileRungPlan:
    if full:
        return CompileRungPlan(
            "pi05:small",
            ("eager", "inductor", "onnxruntime", "openvino"),
            ("fp32", "bf16"),
            ("plain", "fused"),
            (32, 64, 128),
            20,
            20,
            100,
            100,
        )
    return CompileRungPlan(
        DEMO, ("eager", "onnxruntime", "openvino"), ("fp32",), ("plain",), (), None, 5, 20, 20
    )


def _compile(target: str, plan: CompileRungPlan, out: Path, log: Any) -> dict[str, Any]:
    from hotloop.compile.plan import plan_policy, write_artifact
    from hotloop.compile.planner import PlanConfig
    from hotloop.compile.sources import policy_source
    from hotloop.compile.validate import parse_tolerance
    from hotloop.targets import TargetOptions

    config = PlanConfig(
        budget_ms=1000.0,
        tolerance=parse_tolerance("cos:0.995"),
        backends=plan.backends,
        precisions=plan.precisions,
        variants=plan.variants,
        iterations=plan.iterations,
        warmup=2,
        buckets=plan.buckets,
        progress=False,
    )
    source = policy_source(target, TargetOptions(seed=0))
    pi_plan = plan_policy(source, config, log)
    art = write_artifact(source, pi_plan, out, config)
    return {**pi_plan.result, "artifact": str(art)}


def _bench(art: Path, reference: str, plan: CompileRungPlan, progress: bool) -> dict[str, Any]:
    from hotloop.measure.bench import BenchConfig, run_bench
    from hotloop.targets import TargetOptions, find_target

    opts = TargetOptions(prompt_tokens=plan.prompt_tokens)
    case = find_target(str(art)).build_bench(str(art), opts)
    other = find_target(reference).build_bench(reference, opts)
    result = run_bench(
        case, BenchConfig(warmup=3, iterations=plan.bench_iterations, progress=progress), other
    )
    return result.to_dict() | {"samples_ms": None}


def _episodes(target: str, n: int, progress: bool) -> dict[str, Any]:
    from hotloop.closedloop.eval_run import EvalRequest, run_eval

    r = run_eval(
        EvalRequest(target=target, strategy="sync", latency="fixed:0", episodes=n), progress=progress
    )
    return {k: r[k] for k in ("episodes", "successes", "success_rate", "success_ci95")}


def run_rung(
    out_dir: Path,
    full: bool,
    progress: bool = True,
    log: Any = None,
    plan: CompileRungPlan | None = None,
) -> dict[str, Any]:
    """`plan` overrides `rung_plan(full)` (the tests use a tiny one)."""
    import dataclasses

    from hotloop.io import atomic_write_json

    log = log or (lambda s: None)
    out_dir = Path(out_dir)
    plan = plan or rung_plan(full)
    art_dir = out_dir / "compiled"
    art_dir.mkdir(parents=True, exist_ok=True)
    vla_art = art_dir / plan.vla_target.replace(":", "_")
    demo_art = art_dir / DEMO.replace(":", "_")
    for stale in (vla_art, demo_art):  # a previous demo's artifact is replaced, not reused unverified
        if stale.exists():
            import shutil

            shutil.rmtree(stale)
    vla = _compile(plan.vla_target, plan, vla_art, log)
    bench = _bench(vla_art, plan.vla_target, plan, progress)
    if plan.vla_target != DEMO:
        # the demo's prompt fills its few slots: no buckets there
        demo_plan = _compile(DEMO, dataclasses.replace(plan, buckets=()), demo_art, log)
    else:
        demo_plan, demo_art = vla, vla_art
    success = {
        "reference": _episodes(DEMO, plan.episodes, progress),
        "compiled": _episodes(str(demo_art), plan.episodes, progress),
    }
    summary = {
        "target": plan.vla_target,
        "plan_options": {
            "backends": list(plan.backends),
            "precisions": list(plan.precisions),
            "variants": list(plan.variants),
            "buckets": list(plan.buckets),
            "prompt_tokens": plan.prompt_tokens,
        },
        "compile": {k: v for k, v in vla.items() if k != "candidates"},
        "candidates": vla["candidates"],
        "bench": {
            "plan_latency_ms": bench["latency_ms"],
            "reference_latency_ms": bench["compare"]["latency_ms"],
            "speedup_p50": bench["compare"]["ratio_p50"],
            "speedup_p99": bench["compare"]["ratio_p99"],
            "roofline": bench.get("roofline"),
        },
        "demo_plan": demo_plan["plan"],
        "demo_success": success,
    }
    atomic_write_json(out_dir / "compile.json", summary)
    return {"title": f"Compiled plan: {plan.vla_target}", "summary": summary, "html": _html(summary)}


def _html(s: dict[str, Any]) -> str:
    rows = []
    for c in s["candidates"]:
        lat = c.get("latency_ms") or {}
        cos = f"{c['action']['cosine']:.6f}" if c.get("action") else ""
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    c["sub_engine"],
                    c.get("variant", ""),
                    c["backend"],
                    c["precision"],
                    c["status"],
                    f"{lat['p50']:.2f}" if lat else "",
                    cos,
                    c["reason"],
                )
            )
            + "</tr>"
        )
    b = s["bench"]
    plan = ", ".join(f"{st}: {p['backend']} {p['precision']}" for st, p in s["compile"]["plan"].items())
    roof = (b.get("roofline") or {}).get("stages") or {}
    shares = ", ".join(
        f"{st} {r['peak_share'] * 100:.1f} % of {r['precision']} peak"
        for st, r in roof.items()
        if r.get("peak_share") is not None
    )
    succ = []
    for name, r in s["demo_success"].items():
        lo, hi = r["success_ci95"]
        succ.append(f"{name} {r['successes']}/{r['episodes']} (Wilson 95 % {lo:.2f}–{hi:.2f})")
    return (
        f"<p>plan: {html.escape(plan)}; bench (interleaved with fp32 eager): plan p50 "
        f"{b['plan_latency_ms']['p50']:.2f} ms vs reference {b['reference_latency_ms']['p50']:.2f} ms, "
        f"speedup p50 {b['speedup_p50']:.2f}×, p99 {b['speedup_p99']:.2f}×; final-action cosine "
        f"{s['compile']['action_cos_min']:.6f}.</p>"
        f"<p>roofline: {html.escape(shares or 'no matmul peaks cached (run hotloop doctor)')}</p>"
        f"<p>demo:conveyor success at 0 ms: {html.escape('; '.join(succ))}</p>"
        "<table><tr><th>sub-engine</th><th>recipe</th><th>backend</th><th>precision</th><th>status</th>"
        "<th>p50 ms</th><th>action cos</th><th>why</th></tr>" + "".join(rows) + "</table>"
    )
