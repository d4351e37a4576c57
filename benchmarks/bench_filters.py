"""Per-sample cost of each real-time filter and of control-rate interpolation on this machine.

At 1 kHz a control period is 1 ms; these numbers say how much of it a filter takes. Prints a table and,
with `--json PATH`, writes the figures with the machine fingerprint.
Usage: PYTHONPATH=src python benchmarks/bench_filters.py [--json PATH] [--samples N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hotloop.realtime.filters import so3
from hotloop.realtime.filters.kalman import KalmanConfig, KalmanTracker
from hotloop.realtime.filters.lowpass import ButterworthLowPass, FirstOrderLowPass
from hotloop.realtime.filters.window import MovingAverage, SavitzkyGolay
from hotloop.realtime.interpolate import ChunkInterpolator, InterpolationConfig


def _time_us(step, n: int) -> dict[str, float]:
    samples = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter_ns()
        step(i)
        samples[i] = (time.perf_counter_ns() - t0) / 1e3
    p50, p99 = np.percentile(samples, [50, 99])
    return {"p50_us": float(p50), "p99_us": float(p99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--samples", type=int, default=5000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.samples, 7))  # a 7-dof arm's action
    quats = so3.normalize(rng.normal(size=(args.samples, 4)))
    cases = {
        "first-order low-pass (7 dof)": FirstOrderLowPass(5.0, 1000.0).update,
        "Butterworth order 4 (7 dof)": ButterworthLowPass(5.0, 1000.0, order=4).update,
        "moving average 5 (7 dof)": MovingAverage(5).update,
        "Savitzky-Golay 7/2 (7 dof)": SavitzkyGolay(7, 2).update,
    }
    results: dict[str, dict[str, float]] = {}
    for name, update in cases.items():
        results[name] = _time_us(lambda i, u=update: u(x[i]), args.samples)
    kf = KalmanTracker(KalmanConfig("cv", 3))
    results["Kalman CV update (3-D)"] = _time_us(lambda i: kf.update(i * 1e-3, x[i, :3]), args.samples)
    sm = so3.SlerpSmoother(0.2)
    results["SO(3) slerp smoother"] = _time_us(lambda i: sm.update(quats[i]), args.samples)
    wa = so3.WindowAverage(5)
    results["SO(3) Markley window 5"] = _time_us(lambda i: wa.update(quats[i]), args.samples)
    interp = ChunkInterpolator(InterpolationConfig(10.0, 1000.0, "cubic", 0.5, 4.0))
    interp.reset(np.zeros(7))
    chunk = rng.uniform(-0.1, 0.1, (16, 7))
    per_chunk = _time_us(lambda i: interp.commands(chunk), max(10, args.samples // 200))
    results["interpolate 16-action chunk to 1 kHz (per command)"] = {
        k: v / (16 * 100) for k, v in per_chunk.items()
    }
    width = max(map(len, results))
    for name, r in results.items():
        print(f"{name:{width}s}  p50 {r['p50_us']:8.1f} us  p99 {r['p99_us']:8.1f} us")
    if args.json:
        from hotloop.io import atomic_write_json
        from hotloop.measure.fingerprint import machine_fingerprint

        atomic_write_json(args.json, {"results_us": results, "env": machine_fingerprint(1)})
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
