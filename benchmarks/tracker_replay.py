"""The layered chain's estimate, decision by decision, and the tracker replayed over logged detections.

`log`: runs demo:conveyor closed loop behind `--pipeline SPEC` (sync, fixed 50 ms, in this process) and
writes, per episode, every decision's time, estimate, true box state, gripper state and the detections
the tracker took. `replay`: re-runs the Kalman tracker with other settings over the logged detections
and prints the estimate's error (overall, in the 1.5-5 cm band around the gripper, elsewhere), and the
raw detections' error by gripper distance. The closed loop would differ under other settings, so a
replay ranks estimates, not success. Figures and the seeds used: docs/perception.md ("Retuning the
tracker").

Usage:
  PYTHONPATH=src python benchmarks/tracker_replay.py log detector:model=learned 5000 40 learned.json
  PYTHONPATH=src python benchmarks/tracker_replay.py log truth 5000 40 truth.json
  PYTHONPATH=src python benchmarks/tracker_replay.py replay learned.json [more.json ...]
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import numpy as np

HELD = (0.03, 0.06)  # the pipeline's finger gap for "holding the box" (its estimate is the gripper's then)
BAND = (0.015, 0.05)  # gripper-box xy distance where the detector is biased (m)


def log(pipeline: str, seed0: int, n: int, out: str) -> None:
    import hotloop.perception.pipeline as pl
    from hotloop.closedloop.workers import EpisodeJob, EpisodeRunner

    cycles: list[dict[str, Any]] = []
    estimate = pl.PipelinePolicy._estimate

    def logged(self: Any, t: float, state: np.ndarray, frames: list[Any]) -> Any:
        e = estimate(self, t, state, frames)
        cycles.append(
            {
                "t": t,
                "est": None if e is None else e.tolist(),
                "box": state[4:10].tolist(),
                "ee": state[:4].tolist(),
                "meas": [None if f[1] is None else f[1].tolist() for f in frames],
            }
        )
        return e

    pl.PipelinePolicy._estimate = logged  # type: ignore[method-assign]
    job = EpisodeJob(
        target="demo:conveyor", task="conveyor-pick", difficulty=None, strategy="sync",
        latency="fixed:50", pipeline=pipeline, threads=1,
    )  # fmt: skip
    runner = EpisodeRunner(job)
    episodes = []
    t0 = time.time()
    for seed in range(seed0, seed0 + n):
        cycles.clear()
        rec = runner.run(seed)
        episodes.append(
            {"seed": seed, "success": rec["success"], "info": rec["info"], "cycles": list(cycles)}
        )
        print(seed, "success" if rec["success"] else "-", f"{time.time() - t0:.0f} s", flush=True)
    with open(out, "w") as f:
        json.dump(episodes, f)
    print(f"{sum(e['success'] for e in episodes)}/{n} succeeded; wrote {out}")


def _tracker(std: float, q: float) -> Any:
    from hotloop.realtime.filters.kalman import KalmanConfig, KalmanTracker

    low, high = 0.09, 0.13  # conveyor-pick medium: the belt speeds the pipeline's prior covers
    return KalmanTracker(
        KalmanConfig(
            "cv", 3, process_noise=(q, 1e-6, 1e-6), measurement_std=std,
            initial_velocity=(0.5 * (low + high), 0.0, 0.0),
            initial_velocity_std=((high - low) / math.sqrt(12), 0.01, 0.01), gate=25.0,
        )
    )  # fmt: skip


def replay_one(episodes: list[dict[str, Any]], std: float, q: float, near_std: float | None) -> list[float]:
    base, near = _tracker(std, q).config, _tracker(near_std or std, q).config
    pe, ve, dist = [], [], []
    for e in episodes:
        tr = _tracker(std, q)
        for c in e["cycles"]:
            if HELD[0] < c["ee"][3] < HELD[1]:
                tr.reset()  # held: the chain takes the gripper's position
                continue
            ee = np.array(c["ee"][:3])
            for m in c["meas"]:
                if near_std and tr.initialized and m is not None:
                    d = np.linalg.norm(ee[:2] - tr.state_at(c["t"])[0][:2])
                    tr.config = near if BAND[0] <= d < BAND[1] else base
                tr.update(c["t"], None if m is None else np.array(m))
            if not tr.initialized or tr.velocity_std[0] > 0.05:
                continue
            p, v = tr.state_at(c["t"])
            b = np.array(c["box"])
            pe.append(p[0] - b[0])
            ve.append(v[0] - b[3])
            dist.append(np.linalg.norm(ee[:2] - b[:2]))
    x, vx, d = 1e3 * np.array(pe), 1e3 * np.array(ve), np.array(dist)
    band = (d >= BAND[0]) & (d < BAND[1])
    a = np.abs
    return [
        *np.percentile(a(x), [50, 95]), *np.percentile(a(x[band]), [50, 95]), float(x[band].mean()),
        float(np.percentile(a(x[~band]), 95)), *np.percentile(a(vx), [50, 95]),
    ]  # fmt: skip


def replay(files: list[str]) -> None:
    episodes: list[dict[str, Any]] = []
    for f in files:
        with open(f) as fh:
            episodes += json.load(fh)
    print(
        f"{len(episodes)} episodes; estimate x error (mm): all p50 p95 | 1.5-5 cm p50 p95 mean | else p95 | vx p50 p95 (mm/s)"
    )
    for std, q, near in (
        (0.005, 1e-4, None), (0.0025, 1e-4, None), (0.005, 1e-4, 0.01), (0.005, 1e-4, 0.02),
        (0.005, 1e-3, 0.02), (0.005, 1e-5, 0.02),
    ):  # fmt: skip
        r = replay_one(episodes, std, q, near)
        label = (
            f"noise {std * 1e3:.1f} mm"
            + (f", {near * 1e3:.0f} mm in the band" if near else "")
            + f", q {q:g}"
        )
        print(f"{label:42s} " + " ".join(f"{v:6.1f}" for v in r))
    rows = []
    for e in episodes:
        for c in e["cycles"]:
            if HELD[0] < c["ee"][3] < HELD[1]:
                continue
            b, ee = np.array(c["box"]), np.array(c["ee"][:3])
            rows += [(np.linalg.norm(ee[:2] - b[:2]), m[0] - b[0]) for m in c["meas"] if m is not None]
    r = np.array(rows)
    print("raw detections' x error by gripper-box distance: p50 / p95 (mean), mm")
    for lo, hi in ((0, 0.01), (0.01, 0.02), (0.02, 0.05), (0.05, 0.1), (0.1, 1.0)):
        m = (r[:, 0] >= lo) & (r[:, 0] < hi)
        err = 1e3 * r[m, 1]
        print(f"  {lo * 100:.0f}-{hi * 100:.0f} cm: n={m.sum()}, {np.percentile(abs(err), 50):.1f} / "
              f"{np.percentile(abs(err), 95):.1f} ({err.mean():+.1f})")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) >= 6 and sys.argv[1] == "log":
        log(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif len(sys.argv) >= 3 and sys.argv[1] == "replay":
        replay(sys.argv[2:])
    else:
        sys.exit(__doc__)
