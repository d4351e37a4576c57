"""What limits the layered chain's success: its detector swapped for other sensors, same tracker and policy.

demo:conveyor runs closed loop behind `--pipeline detector:model=learned` (sync, fixed 50 ms, in this
process), with the chain's detector replaced per mode:

- `oracle NOISE_MM`: a perfect sensor, the true box position on the belt plane plus Gaussian noise of
  NOISE_MM per axis (0: exact), through the same tracker: what the estimation layer and the policy
  reach when perception is perfect, and how much white noise they tolerate;
- `camera PX DETECTOR`: the learned detector (a folder `train-demo --variant detector` wrote) on a
  second top camera rendered at PX px, at input resolution PX: what a sharper camera buys;
- `bias DETECTOR`: the shipped chain drives; at every frame both the shipped detector and DETECTOR are
  scored against the simulator, by the gripper's distance to the box (signed x error along the belt,
  |error| p50 / p95; boxes riding the belt only).

Usage (figures and seeds: docs/perception.md, "Training on the chain's own frames"):
  PYTHONPATH=src python benchmarks/chain_diagnostics.py oracle 0 5000 32 out.json
  PYTHONPATH=src python benchmarks/chain_diagnostics.py camera 128 runs/det 5000 32 out.json
  PYTHONPATH=src python benchmarks/chain_diagnostics.py bias runs/det 5000 15
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

BANDS = ((0.0, 0.01), (0.01, 0.02), (0.02, 0.05), (0.05, 0.10), (0.10, 9.0))  # gripper-box xy (m)


def _runner() -> Any:
    from hotloop.closedloop.workers import EpisodeJob, EpisodeRunner

    job = EpisodeJob(
        target="demo:conveyor", task="conveyor-pick", difficulty=None, strategy="sync",
        latency="fixed:50", pipeline="detector:model=learned", threads=1,
    )  # fmt: skip
    return EpisodeRunner(job)


class Oracle:
    centre_std_m = None

    def __init__(self, env: Any, plane_z: float, noise_mm: float) -> None:
        self.env, self.plane_z, self.noise = env, plane_z, noise_mm / 1e3
        self.rng = np.random.default_rng(0)

    def detect(self, image: np.ndarray) -> Any:
        from hotloop.perception.box_detector import Detection

        p = np.asarray(self.env.box_pos(), dtype=np.float64).copy()
        p[2] = self.plane_z
        p[:2] += self.rng.normal(0.0, self.noise, 2)
        return Detection(p, 100, 1.0)


class SharperCamera:
    centre_std_m = None

    def __init__(self, env: Any, plane_z: float, px: int, detector_dir: str) -> None:
        import mujoco

        from hotloop.perception.box_detector import PinholeCamera
        from hotloop.perception.learned_detector import LearnedBoxDetector, load_any

        cal = PinholeCamera.from_env(env)
        camera = PinholeCamera(cal.position, cal.rotation, cal.fovy_deg, px)
        self.env = env
        self.renderer = mujoco.Renderer(env.model, height=px, width=px)
        self.inner = LearnedBoxDetector(load_any(detector_dir), camera, plane_z, px)

    def detect(self, image: np.ndarray) -> Any:
        self.renderer.update_scene(self.env.data, camera=self.env.config.camera)
        return self.inner.detect(np.asarray(self.renderer.render(), dtype=np.uint8))


def play(runner: Any, seed0: int, n: int, out: str) -> None:
    results, t0 = [], time.time()
    for seed in range(seed0, seed0 + n):
        ok = bool(runner.run(seed)["success"])
        results.append({"seed": seed, "success": ok})
        print(seed, ok, f"{time.time() - t0:.0f} s", flush=True)
    with open(out, "w") as f:
        json.dump(results, f)
    print(f"{sum(r['success'] for r in results)}/{n} succeeded; wrote {out}")


def bias(detector_dir: str, seed0: int, n: int) -> None:
    from hotloop.perception.box_detector import PinholeCamera
    from hotloop.perception.learned_detector import LearnedBoxDetector, load_any

    runner = _runner()
    env, chain = runner.env, runner.policy
    shipped = chain.detector
    other = LearnedBoxDetector(load_any(detector_dir), PinholeCamera.from_env(env), chain.plane_z, 64)
    rows: list[dict[str, Any]] = []

    class Scored:
        centre_std_m = None

        def detect(self, image: np.ndarray) -> Any:
            row = {"box": np.asarray(env.box_pos(), dtype=np.float64).copy(), "ee": env.ee_pos().copy()}
            for name, d in (("shipped", shipped), (detector_dir, other)):
                found = d.detect(image).position
                row[name] = None if found is None else np.asarray(found)
            rows.append(row)
            return shipped.detect(image)

    chain.detector = Scored()
    for seed in range(seed0, seed0 + n):
        runner.run(seed)
    for name in ("shipped", detector_dir):
        print(name)
        for lo, hi in BANDS:
            err = np.array(
                [
                    r[name][:2] - r["box"][:2]
                    for r in rows
                    if lo <= np.linalg.norm(r["ee"][:2] - r["box"][:2]) < hi
                    and r[name] is not None
                    and abs(r["box"][2] - chain.plane_z) < 0.003
                ]
            ).reshape(-1, 2)
            if len(err):
                norm = 1e3 * np.linalg.norm(err, axis=1)
                print(
                    f"  {100 * lo:.0f}-{100 * hi:.0f} cm: n={len(err)} x mean {1e3 * err[:, 0].mean():+.1f} mm, "
                    f"|error| p50 {np.median(norm):.1f} p95 {np.percentile(norm, 95):.1f} mm"
                )


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "bias":
        bias(argv[1], int(argv[2]), int(argv[3]))
        return
    runner = _runner()
    chain = runner.policy
    if mode == "oracle":
        chain.detector = Oracle(runner.env, chain.plane_z, float(argv[1]))
        play(runner, int(argv[2]), int(argv[3]), argv[4])
    elif mode == "camera":
        chain.detector = SharperCamera(runner.env, chain.plane_z, int(argv[1]), argv[2])
        play(runner, int(argv[3]), int(argv[4]), argv[5])
    else:
        raise SystemExit(f"unknown mode {mode!r}: oracle, camera or bias")


if __name__ == "__main__":
    main(sys.argv[1:])
