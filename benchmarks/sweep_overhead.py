"""Scheduling overhead and throughput of closed-loop evaluation on the local worker pool and on Ray (issue 22).

Runs the same demo:conveyor episodes four times: the local pool with 1 and 2 workers, and
`--cluster ray:local` with at most 1 and 2 workers (a Ray head started and stopped by each run). Two shapes:

- `--shape eval` (the issue's own command): `hotloop eval demo:conveyor --strategy sync,async
  --sweep-latency 0,200 --episodes N --json ...` with `--workers 1|2` or `--cluster ray:local
  --max-workers 1|2` (4 points; the local pool runs them one after another, Ray all at once);
- `--shape sweep`: `hotloop sweep` of a 2-cell spec (async at fixed:0 and fixed:200, N episodes each).

What is measured (each run's own summary: the eval JSON's "executor", the sweep's OUT/runs.jsonl; see
`hotloop/closedloop/execution.py`). A worker slot is held for the executor's wall time (from its start to
the last episode's result); `episode` is the time the workers spent playing episodes, measured inside
them. Then

    overhead per episode = (workers x wall - sum of episode times) / episodes
    overhead %           = overhead per episode / mean episode time

i.e. the wall time per episode (per worker) minus the in-worker episode time, as a share of the episode.
It is split into what each worker pays once (start: process or actor start and imports; build: env and
policy; tail: idle after its last episode while others finish) and what every episode pays (dispatch:
the worker idle between two of its episodes, measured in the worker). Ray's head start (`ray.init` of
ray:local) is outside the executor's wall time and shown apart (`connect s`); "command s" is the whole
command (interpreter start, checks, report) from outside.

The records of every run are compared (every field but `infer_wall_ms`, the measured inference time):
the executors must give the same episodes. Run from the repository root:

    MUJOCO_GL=egl PYTHONPATH=src python benchmarks/sweep_overhead.py --shape eval --episodes 20 --json sweep_overhead.json
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

RUNS = {
    "local1": ("local, 1 worker", ["--workers", "1"]),
    "local2": ("local, 2 workers", ["--workers", "2"]),
    "ray1": ("ray:local, 1 worker", ["--cluster", "ray:local", "--max-workers", "1"]),
    "ray2": ("ray:local, 2 workers", ["--cluster", "ray:local", "--max-workers", "2"]),
}


def _command(args: list[str]) -> float:
    cmd = [sys.executable, "-m", "hotloop", *args]
    print("$ hotloop", " ".join(args), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-3:]}")
    return round(time.perf_counter() - t0, 2)


def run_eval(target: str, episodes: int, out: Path, extra: list[str]) -> tuple[dict, dict]:
    path = out.with_suffix(".json")
    args = ["eval", target, "--strategy", "sync,async", "--sweep-latency", "0,200"]
    command_s = _command([*args, "--episodes", str(episodes), "--quiet", "--json", str(path), *extra])
    data = json.loads(path.read_text())
    records = {
        (r["strategy"]["name"], r["latency"]["spec"], e["seed"]): e
        for r in data["runs"]
        for e in r["per_episode"]
    }
    return {**data["executor"], "command_s": command_s}, records


def run_sweep(target: str, episodes: int, out: Path, extra: list[str]) -> tuple[dict, dict]:
    spec = out.parent / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "target": target,
                "task": "conveyor-pick",
                "strategy": "async",
                "latency": ["fixed:0", "fixed:200"],
                "episodes": episodes,
            }
        )
    )
    command_s = _command(["sweep", str(spec), "--out", str(out), "--quiet", *extra])
    summary = json.loads((out / "runs.jsonl").read_text().splitlines()[-1])
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    return {**summary, "command_s": command_s}, {(r["cell"], r["seed"]): r["record"] for r in rows}


def _same(a: dict, b: dict) -> bool:
    def strip(records: dict) -> dict:
        return {k: {f: v for f, v in r.items() if f != "infer_wall_ms"} for k, r in records.items()}

    return strip(a) == strip(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=("eval", "sweep"), default="eval")
    ap.add_argument("--target", default="demo:conveyor")
    ap.add_argument("--episodes", type=int, default=20, help="per point (eval: 4 points; sweep: 2 cells)")
    ap.add_argument("--runs", default="local1,local2,ray1,ray2", help="which of " + ",".join(RUNS))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    chosen = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in chosen if r not in RUNS]
    if unknown:
        sys.exit(f"--runs {','.join(unknown)}: use some of {','.join(RUNS)}")
    run = run_eval if args.shape == "eval" else run_sweep
    load_before = os.getloadavg()
    rows = []
    first: dict | None = None
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        for key in chosen:
            name, extra = RUNS[key]
            summary, records = run(args.target, args.episodes, Path(tmp) / key, extra)
            first = records if first is None else first
            same = same and _same(first, records)
            rows.append({"run": name, **summary})
    load_after = os.getloadavg()
    one = {r["executor"]: r["episodes_per_s"] for r in rows if r["slots"] == 1}
    print(
        f"\n{'run':21} {'eps':>4} {'wall s':>6} {'eps/s':>5} {'x1':>4} {'ep s':>5} {'overhead ms/ep':>14} "
        f"{'%':>5} {'dispatch ms/ep':>14} {'%':>5} {'start s':>7} {'build s':>7} {'tail s':>6} "
        f"{'connect s':>9} {'command s':>9}"
    )
    nan = float("nan")
    for r in rows:
        parts = r.get("overhead_parts_s") or {}  # (a summary from before the split has none)
        base = one.get(r["executor"])
        dispatch = r.get("dispatch_per_episode_s")
        print(
            f"{r['run']:21} {r['episodes']:>4} {r['wall_s']:>6.1f} {r['episodes_per_s']:>5.2f} "
            f"{r['episodes_per_s'] / base if base else nan:>4.2f} {r['episode_s_mean']:>5.2f} "
            f"{1000 * r['overhead_per_episode_s']:>14.0f} {r['overhead_pct_of_episode']:>5.1f} "
            f"{nan if dispatch is None else 1000 * dispatch:>14.1f} {r.get('dispatch_pct_of_episode') or nan:>5.2f} "
            f"{parts.get('start', nan):>7.1f} {parts.get('build', r.get('build_s_total', nan)):>7.1f} "
            f"{parts.get('tail', nan):>6.1f} {r.get('connect_s') or 0:>9.1f} {r['command_s']:>9.1f}"
        )
    print(
        "x1: episodes/s over the same executor's 1-worker run; start, build and tail: worker-seconds, paid once "
        "per worker; dispatch: paid every episode"
    )
    print(f"records equal across runs (all fields but infer_wall_ms): {same}")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "shape": args.shape,
                    "episodes_per_point": args.episodes,
                    "runs": rows,
                    "records_equal": same,
                    "loadavg_before": load_before,
                    "loadavg_after": load_after,
                    "cpus": os.cpu_count(),
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.json}")
    if not same:
        sys.exit("the executors gave different episodes")


if __name__ == "__main__":
    main()
