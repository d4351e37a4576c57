"""Closed-loop metrics: success with a Wilson interval, smoothness (jerk), chunk-boundary jumps."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a success rate; unlike the normal interval it stays inside [0, 1]
    and is honest at 0 or n successes, which small evaluations hit often. `successes` may be fractional
    (a rate times a number of independent trials: `hotloop.closedloop.evaluator.summarize`)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Rounding can put an end a hair on the wrong side of p (1 - 1e-17 at p = 1): the interval must hold p.
    return (min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half)))


def rms_jerk(positions: np.ndarray, dt: float) -> float:
    """Root-mean-square jerk (m/s^3) of a trajectory sampled every `dt` seconds, from third differences."""
    positions = np.asarray(positions, dtype=np.float64)
    if positions.ndim != 2 or positions.shape[0] < 4:
        return 0.0
    jerk = np.diff(positions, n=3, axis=0) / dt**3
    return float(np.sqrt(np.mean(np.sum(jerk * jerk, axis=1))))


def mean_std(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None}
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std())}
