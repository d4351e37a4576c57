"""Latency under contention: each backend's plan, at 1 and 2 threads, pinned or not, quiet and beside busy
processes (`hotloop bench --contend N`, blocks alternating quiet / busy in one run).

    PYTHONPATH=src python benchmarks/contention.py --target pi05:tiny --busy 1 --iters 60 --out contention

For each backend it compiles one fp32 plan of TARGET (`hotloop compile --backends B --precisions fp32`),
then benches it (eager: the target itself) under three placements:
- `2 threads`: every usable CPU, unpinned (what a default run does);
- `1 thread`: one thread, unpinned;
- `1 thread pinned`: one thread pinned to the last CPU (`--pin`), the busy work left unpinned
  (`--reserve-cores 1` is the unpinned `1 thread`: pinning measured worse, docs/compile.md).
Writes OUT/contention.json (every bench's figures), OUT/contention.md (the table) and OUT/contention.png
(p99 inflation per plan and placement). Run it on a quiet machine: `uptime` first; the busy processes
are the benchmark's own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PLACEMENTS = {
    "2 threads": ["--threads", "2"],
    "1 thread": ["--reserve-cores", "1"],  # usable - 1 threads, unpinned
    "1 thread pinned": ["--threads", "1", "--pin", str(max(os.sched_getaffinity(0)))],
}
BACKENDS = ("eager", "inductor", "onnxruntime", "openvino")


def hotloop(*args: str) -> None:
    cmd = [sys.executable, "-m", "hotloop", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(
        cmd, check=True, env={**os.environ, "HOTLOOP_MAX_LOAD": os.environ.get("HOTLOOP_MAX_LOAD", "0.5")}
    )


def plan_for(backend: str, target: str, out: Path) -> str:
    if backend == "eager":
        return target
    art = out / f"art-{backend}"
    if not (art / "manifest.json").exists():
        hotloop("compile", target, "--backends", backend, "--precisions", "fp32", "--variants", "plain",
                "--iters", "5", "--threads", "2", "--quiet", "-o", str(art))  # fmt: skip
    return str(art)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="pi05:tiny")
    ap.add_argument("--busy", type=int, default=1, help="busy processes beside the target")
    ap.add_argument("--iters", type=int, default=60, help="timed calls per condition (quiet and busy each)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--out", type=Path, default=Path("contention"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for backend in args.backends.split(","):
        plan = plan_for(backend, args.target, args.out)
        for placement, flags in PLACEMENTS.items():
            js = args.out / f"{backend}-{placement.replace(' ', '-')}.json"
            hotloop("bench", plan, *flags, "--contend", str(args.busy), "--iters", str(args.iters),
                    "--warmup", str(args.warmup), "--quiet", "--json", str(js))  # fmt: skip
            data = json.loads(js.read_text())
            busy = data["contention"]
            rows.append(
                {
                    "backend": backend,
                    "placement": placement,
                    "quiet_p50": data["latency_ms"]["p50"],
                    "quiet_p99": data["latency_ms"]["p99"],
                    "busy_p50": busy["latency_ms"]["p50"],
                    "busy_p99": busy["latency_ms"]["p99"],
                    "inflation_p50": busy["inflation_p50"],
                    "inflation_p99": busy["inflation_p99"],
                    "load_avg_at_start": data["env"].get("load_avg"),
                }
            )
    (args.out / "contention.json").write_text(
        json.dumps({"target": args.target, "busy": args.busy, "rows": rows}, indent=1)
    )
    lines = [
        f"| {args.target} plan | placement | quiet p50 / p99 ms | beside {args.busy} busy p50 / p99 ms | inflation p50 / p99 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} fp32 | {r['placement']} | {r['quiet_p50']:.2f} / {r['quiet_p99']:.2f} | "
            f"{r['busy_p50']:.2f} / {r['busy_p99']:.2f} | {r['inflation_p50']:.2f}x / {r['inflation_p99']:.2f}x |"
        )
    (args.out / "contention.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(rows, args.out / "contention.png", args.target, args.busy)
    print(f"wrote {args.out / 'contention.json'}, contention.md, contention.png")


def plot(rows: list[dict[str, Any]], path: Path, target: str, busy: int) -> None:
    """p99 inflation per plan (bars by placement, log scale) with the 1.5x target drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    placements = list(dict.fromkeys(r["placement"] for r in rows))
    width = 0.8 / len(placements)
    for k, placement in enumerate(placements):
        ys = [
            next(r["inflation_p99"] for r in rows if r["backend"] == b and r["placement"] == placement)
            for b in backends
        ]
        ax.bar([i + k * width for i in range(len(backends))], ys, width, label=placement)
    ax.axhline(1.5, color="k", linestyle="--", linewidth=1, label="1.5x target")
    ax.set_xticks([i + width for i in range(len(backends))], backends)
    ax.set_yscale("log")
    ax.set_ylabel(f"p99 beside {busy} busy / quiet")
    ax.set_title(f"{target}: p99 inflation beside {busy} busy process(es)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
