"""`hotloop profile`: per-operator time per sub-engine, from each backend's own profiler.

eager / inductor: torch.profiler self CPU time per aten op; onnxruntime: its session profiling (kernel
time per ONNX op type); openvino: its performance counters (per node type and kernel). Times are totals
over the profiled runs divided by the runs, so rows read as ms per inference of that sub-engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def profile_runners(runners: dict[str, Any], iterations: int, top: int) -> dict[str, Any]:
    report: dict[str, Any] = {"iterations": iterations, "sub_engines": {}}
    for name, runner in runners.items():
        rows = runner.profile(iterations)
        rows = sorted(rows, key=lambda r: -r[1])
        total = sum(ms for _, ms in rows) / iterations
        report["sub_engines"][name] = {
            "backend": runner.backend,
            "precision": runner.precision,
            "total_ms": total,
            "ops": [
                {"op": op, "ms": ms / iterations, "share": (ms / iterations) / total if total else 0.0}
                for op, ms in rows[:top]
            ],
        }
    return report


def profile_target(target: str, iterations: int, top: int) -> dict[str, Any]:
    """Profile an artifact's runners, or a policy target's eager fp32 sub-engines."""
    if (Path(target) / "manifest.json").is_file():
        from hotloop.runtime.engine import Engine

        engine = Engine.load(target, warmup=1)
        report = profile_runners(engine.runners, iterations, top)
        report["target"] = target
        return report
    import torch

    from hotloop.compile.backends.eager import TorchRunner
    from hotloop.compile.sources import policy_source
    from hotloop.targets import TargetOptions

    source = policy_source(target, TargetOptions())
    engines = source.family.build_subengines(source.model, source.shape, torch.float32)
    loops = {
        s.loop.loop for s in source.family.stages if s.loop is not None
    }  # the step engine runs each loop
    runners = {n: TorchRunner(e, "fp32", e.module) for n, e in engines.items() if n not in loops}
    report = profile_runners(runners, iterations, top)
    report["target"] = target
    return report


def print_profile(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for name, sub in report["sub_engines"].items():
        table = Table(title=f"{name}: {sub['backend']} {sub['precision']}, {sub['total_ms']:.3f} ms per run")
        for col in ("op", "ms", "share"):
            table.add_column(col, overflow="fold")
        for row in sub["ops"]:
            table.add_row(row["op"], f"{row['ms']:.3f}", f"{100 * row['share']:.1f} %")
        console.print(table)
