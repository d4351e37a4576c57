"""The headline of a `hotloop demo` report: the figures a reader came for, in a few lines.

The same lines open report.html (before the rungs' detail) and end the command's terminal output. They
are computed from the report as written to report.json (`headline_lines(report)`), so the page, the
terminal and the file can never disagree: the compiled plan's speed-up and the accuracy it kept, success
against latency per strategy, each family's curve and compressed plan, and the machine it ran on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hotloop.closedloop.robustness import NONE

TITLE = "hotloop demo, the headline"


def headline_lines(report: dict[str, Any]) -> list[str]:
    """Lines of plain text (no markup) from a report.json dict: one block per rung that ran, then the
    machine. A failed rung is one line with its error."""
    lines = [TITLE]
    for rung in report.get("rungs", []):
        if rung.get("error"):
            lines.append(f"{rung['title']}: FAILED ({rung['error']})")
            continue
        lines += _BY_NAME.get(rung.get("name", ""), _nothing)(rung["summary"])
    lines.append(_machine(report))
    return lines


def format_ms(ms: float) -> str:
    """Three significant figures, never an exponent: 0.0523, 8.41, 89.7, 1950."""
    return f"{ms:.0f}" if abs(ms) >= 1000 else f"{ms:.3g}"


def _nothing(summary: dict[str, Any]) -> list[str]:
    return []


def _latency(summary: dict[str, Any]) -> list[str]:
    lat = summary["latency_ms"]
    return [
        f"latency of {summary['target']}: p50 {format_ms(lat['p50'])} ms, p99 {format_ms(lat['p99'])} ms "
        f"({summary['iterations']} iterations)"
    ]


def _compile(summary: dict[str, Any]) -> list[str]:
    bench, plan = summary["bench"], summary["compile"]
    lines = [
        f"compiled plan of {summary['target']}: {bench['speedup_p50']:.2f}x faster than fp32 eager at p50, "
        f"{bench['speedup_p99']:.2f}x at p99 ({format_ms(bench['plan_latency_ms']['p50'])} ms against "
        f"{format_ms(bench['reference_latency_ms']['p50'])} ms at p50); final-action cosine "
        f"{plan['action_cos_min']:.6f} (tolerance {plan['tolerance']})"
    ]
    success = summary["demo_success"]
    ref, comp = success["reference"], success["compiled"]
    lines.append(
        f"compiled demo:conveyor in closed loop at 0 ms: {comp['successes']}/{comp['episodes']} against the "
        f"reference's {ref['successes']}/{ref['episodes']}"
    )
    return lines


def _percent(point: dict[str, Any] | None) -> str:
    return "-" if point is None else f"{100 * point['success_rate']:.0f} %"


def _success_table(success: dict[str, dict[str, Any]], latencies: list[str], indent: str) -> list[str]:
    """One line per strategy: its success at each latency, in columns."""
    width = max(len(s) for s in success)
    head = f"{indent}{'':{width}}" + "".join(f"{ms + ' ms':>9}" for ms in latencies)
    rows = [
        f"{indent}{name:{width}}" + "".join(f"{_percent(points.get(ms)):>9}" for ms in latencies)
        for name, points in success.items()
    ]
    return [head, *rows]


def _closed_loop(summary: dict[str, Any]) -> list[str]:
    plan = summary["plan"]
    latencies = [f"{ms:g}" for ms in plan["latencies_ms"]]
    return [
        f"success against latency, {summary['target']} on {summary['task']} (simulated latency; "
        f"{plan['episodes_per_point']} episodes a point, {plan['episodes_sync_0ms']} at sync 0 ms):",
        *_success_table(summary["success"], latencies, "  "),
    ]


def _ladder(label: str, rungs: list[dict[str, Any]], stopped: str | None) -> str:
    """The last rung of a compression recipe against the reference: speed-up, cosine, success kept."""
    ref, last = rungs[0], rungs[-1]
    kept = ""
    if last.get("success_rate") is not None and ref.get("success_rate") is not None:
        kept = (
            f", success {100 * last['success_rate']:.0f} % against the reference's "
            f"{100 * ref['success_rate']:.0f} % (n = {last['episodes']})"
        )
    speedup = "-" if last["speedup_p50"] is None else f"{last['speedup_p50']:.2f}x"
    text = f"{label} {last['step']}: {speedup} the reference's speed at p50, action cosine {last['action_cos']:.4f}{kept}"
    return text + (f" (stopped: {stopped})" if stopped else "")


def _compression(summary: dict[str, Any]) -> list[str]:
    return [_ladder("compression ladder, demo:conveyor,", summary["rungs"], summary["stopped"])]


def _families(summary: dict[str, Any]) -> list[str]:
    latencies = [f"{ms:g}" for ms in summary["plan"]["latencies_ms"]]
    lines = [
        f"LeRobot families in closed loop (simulated latency; {summary['plan']['episodes']} episodes a point):"
    ]
    for target, policy in summary["policies"].items():
        lines.append(f"  {target}:")
        lines += _success_table(policy["success"], latencies, "    ")
        compression = policy["compression"]
        lines.append("    " + _ladder("compressed,", compression["rungs"], compression["stopped"]))
    return lines


def _robustness(summary: dict[str, Any]) -> list[str]:
    lines = [
        f"robustness at {summary['latency']} ({summary['episodes']} episodes a point): success unperturbed, "
        "and under the perturbation that costs most"
    ]
    success = summary["success"]
    for plan in summary["plans"]:
        cells = {name: row[plan] for name, row in success.items() if plan in row}
        unperturbed = cells.get(NONE)
        perturbed = {name: cell for name, cell in cells.items() if name != NONE}
        worst = min(perturbed, key=lambda name: perturbed[name]["success_rate"]) if perturbed else None
        text = f"  {plan}: {_percent(unperturbed)}"
        if worst is not None:
            text += f", {_percent(perturbed[worst])} under {worst}"
        lines.append(text)
    return lines


def _machine(report: dict[str, Any]) -> str:
    env = report.get("env", {})
    load = env.get("load_avg") or [None]
    load_text = (
        "" if load[0] is None else f", load average {load[0]:.1f} at the end (the demo's own work included)"
    )
    commit = str(env.get("git_commit") or "no commit")[:12]
    return (
        f"machine: {env.get('cpu_model')}, {env.get('cpu_count')} CPUs{load_text}; "
        f"hotloop {report.get('hotloop_version')} ({commit})"
    )


# By the rung's name in `hotloop.demo.report.RUNGS`.
_BY_NAME: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "harness": _latency,
    "vla": _latency,
    "compile": _compile,
    "closed-loop": _closed_loop,
    "compression": _compression,
    "families": _families,
    "robustness": _robustness,
}
