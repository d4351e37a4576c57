"""Scheduling overhead and throughput of `hotloop sweep` on the local worker pool and on Ray (issue 22).

Runs one small demo:conveyor grid four times, each into a fresh store: the local pool with 1 and 2
workers, and `--cluster ray:local` with at most 1 and 2 workers (a Ray head started and stopped by each
run). Each run's own summary (OUT/runs.jsonl, written by the command) gives wall time, episodes/s, mean
episode time and the scheduling overhead per episode, (workers x wall - episode time - build time) /
episodes. The table is printed and, with --json, written with the machine's load before and after.
Run from the repository root:

    MUJOCO_GL=egl PYTHONPATH=src python benchmarks/sweep_overhead.py --episodes 6 --json sweep_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(spec: Path, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "hotloop", "sweep", str(spec), "--out", str(out), "--quiet", *extra]
    print("$", " ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    summary = json.loads((out / "runs.jsonl").read_text().splitlines()[-1])
    summary["command_s"] = round(time.perf_counter() - t0, 2)  # with interpreter start and the report
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="demo:conveyor")
    ap.add_argument("--episodes", type=int, default=6, help="per cell (2 cells)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(
            json.dumps(
                {
                    "target": args.target,
                    "task": "conveyor-pick",
                    "strategy": "async",
                    "latency": ["fixed:0", "fixed:200"],
                    "episodes": args.episodes,
                }
            )
        )
        load_before = os.getloadavg()
        rows = []
        for name, extra in (
            ("local, 1 worker", ["--workers", "1"]),
            ("local, 2 workers", ["--workers", "2"]),
            ("ray:local, 1 worker", ["--cluster", "ray:local", "--max-workers", "1"]),
            ("ray:local, 2 workers", ["--cluster", "ray:local", "--max-workers", "2"]),
        ):
            s = run(spec, Path(tmp) / name.replace(" ", "").replace(",", "-").replace(":", ""), extra)
            rows.append({"run": name, **s})
        load_after = os.getloadavg()
    print(
        f"\n{'run':22} {'eps':>4} {'wall s':>7} {'eps/s':>6} {'episode s':>9} {'overhead/ep s':>13} {'% of ep':>7}"
    )
    for r in rows:
        print(
            f"{r['run']:22} {r['episodes']:>4} {r['wall_s']:>7.1f} {r['episodes_per_s']:>6.2f} "
            f"{r['episode_s_mean']:>9.2f} {r['overhead_per_episode_s']:>13.3f} {r['overhead_pct_of_episode']:>7.1f}"
        )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "runs": rows,
                    "loadavg_before": load_before,
                    "loadavg_after": load_after,
                    "cpus": os.cpu_count(),
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
