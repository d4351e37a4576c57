"""The figures of one `benchmarks/gpu_check.sh` run in one page: OUT/summary.md (and OUT/summary.json).

    python benchmarks/gpu_check_summary.py OUT

Reads OUT/steps.tsv (each step's status) and the JSONs the steps wrote; a JSON that is missing (its step
failed, timed out or was skipped) leaves its row out, and the steps table says why. Standard library only,
so it runs even when the GPU venv could not be built.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

# bench JSON -> what it measured (the rows of the latency table, in the order docs/gpu.md records them)
BENCHES = (
    ("bench-small-cuda-float32.json", "pi05:small eager fp32 (cuda)"),
    ("bench-small-cuda-bfloat16.json", "pi05:small eager bf16 (cuda)"),
    ("bench-small-tensorrt.json", "pi05:small TensorRT plan"),
    ("bench-small-best.json", "pi05:small planner's choice (eager, inductor, TensorRT)"),
    ("bench-full-cuda-bfloat16-3view.json", "pi05:full eager bf16, 3 views (cuda)"),
    ("bench-full-cuda-bfloat16-1view.json", "pi05:full eager bf16, 1 view (cuda)"),
    ("bench-full-tensorrt.json", "pi05:full TensorRT bf16 plan"),
)
COMPILES = ("compile-small-tensorrt.json", "compile-small-best.json", "compile-full-tensorrt.json")
GRAPHS = ("graphs-small-bfloat16.json",)


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _ms(stats: dict[str, Any] | None, key: str) -> str:
    return f"{stats[key]:.2f}" if stats and stats.get(key) is not None else "-"


def steps(out: Path) -> list[dict[str, str]]:
    path = out / "steps.tsv"
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


def bench_rows(out: Path) -> list[dict[str, Any]]:
    rows = []
    for name, what in BENCHES:
        data = _load(out / name)
        if data is None:
            continue
        device = (data.get("device_stages") or {}).get("total")
        rows.append(
            {
                "what": what,
                "file": name,
                "host_ms": data["latency_ms"],
                "device_ms": device,  # None where no stage ran on CUDA events (an artifact's bench)
                "sync_gap_ms_p50": (data.get("sync_gap_ms") or {}).get("total"),
                "stages_host_p50": {k: v["p50"] for k, v in data["stages"].items()},
            }
        )
    return rows


def compile_rows(out: Path) -> list[dict[str, Any]]:
    rows = []
    for name in COMPILES:
        data = _load(out / name)
        if data is None:
            continue
        plan = {stage: f"{p['backend']} {p['precision']}" for stage, p in data["plan"].items()}
        rows.append(
            {
                "file": name,
                "plan": plan,
                "reference_ms": data.get("reference_latency_ms"),
                "plan_ms": data["plan_latency_ms"],
                "action_cos_min": data.get("action_cos_min"),
            }
        )
    return rows


def graph_rows(out: Path) -> list[dict[str, Any]]:
    return [data for name in GRAPHS if (data := _load(out / name)) is not None]


def device_lines(out: Path) -> list[str]:
    """The device and versions (from the first bench JSON), and what doctor said of CUDA and TensorRT."""
    lines = ["device: no bench JSON was written (see the steps table)"]
    for name, _ in BENCHES:
        env = (_load(out / name) or {}).get("env")
        if env:
            versions = env.get("versions") or {}
            lines = [
                f"device: {env.get('cuda_device') or 'no CUDA device recorded'}; CPU {env.get('cpu_model')} "
                f"x {env.get('cpu_count')}; torch {versions.get('torch')}; python {env.get('python')}"
            ]
            break
    checks = {c.get("name"): c for c in _load(out / "doctor.json") or []}
    if checks:
        said = [f"{n}: {checks[n]['detail']}" for n in ("cuda", "tensorrt") if n in checks]
        lines.append("doctor: " + "; ".join(said))
    return lines


def render(out: Path) -> str:
    lines = ["# gpu_check summary", "", *device_lines(out), "", "| step | status | rc | wall s | timeout s |"]
    lines.append("|---|---|---|---|---|")
    lines += [
        f"| {s['step']} | {s['status']} | {s['rc']} | {s['wall_s']} | {s['timeout_s']} |" for s in steps(out)
    ]
    lines += [
        "",
        "| what | host p50 | host p99 | device p50 | device p99 | sync gap p50 |",
        "|---|---|---|---|---|---|",
    ]
    for r in bench_rows(out):
        gap = r["sync_gap_ms_p50"]
        lines.append(
            f"| {r['what']} | {_ms(r['host_ms'], 'p50')} | {_ms(r['host_ms'], 'p99')} | "
            f"{_ms(r['device_ms'], 'p50')} | {_ms(r['device_ms'], 'p99')} | {'-' if gap is None else f'{gap:.2f}'} |"
        )
    lines += [
        "",
        "| CUDA Graphs (denoise loop) | host p50 | host p99 | device p50 | device p99 |",
        "|---|---|---|---|---|",
    ]
    for g in graph_rows(out):
        for mode in ("graphs_off", "graphs_on"):
            figures = g[mode] or {}
            label = f"{g['target']} {g['dtype']} {mode.replace('_', ' ')}"
            lines.append(
                f"| {label} | {_ms(figures.get('host_ms'), 'p50')} | {_ms(figures.get('host_ms'), 'p99')} | "
                f"{_ms(figures.get('device_ms'), 'p50')} | {_ms(figures.get('device_ms'), 'p99')} |"
            )
    lines += [
        "",
        "| compile | plan | reference p50 | plan p50 | plan p99 | action cos |",
        "|---|---|---|---|---|---|",
    ]
    for c in compile_rows(out):
        plan = ", ".join(f"{k}: {v}" for k, v in c["plan"].items())
        cos = c["action_cos_min"]
        lines.append(
            f"| {c['file']} | {plan} | {_ms(c['reference_ms'], 'p50')} | {_ms(c['plan_ms'], 'p50')} | "
            f"{_ms(c['plan_ms'], 'p99')} | {'-' if cos is None else f'{cos:.6f}'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(
            f"error: OUT {argv[0] if argv else '(none)'!r} is not a folder; give gpu_check.sh's OUT",
            file=sys.stderr,
        )
        return 2
    out = Path(argv[0])
    summary = {
        "steps": steps(out),
        "benches": bench_rows(out),
        "graphs": graph_rows(out),
        "compiles": compile_rows(out),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "summary.md").write_text(render(out))
    print(f"wrote {out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
