"""Rotation smoothing on SO(3) with unit quaternions (R6.4): slerp, averaging, streaming smoothers.

Quaternions are [w, x, y, z] (scalar first, as MuJoCo writes them). q and -q are the same rotation (the
double cover): every operation here is sign-blind — slerp takes the short way, the average is Markley's
eigenvector of sum(w_i q_i q_i^T), which is the same for q and -q, and the smoothers keep their output on
one hemisphere so consecutive outputs never flip sign. Euler angles are never averaged: averaging them
breaks at the wrap-around (179 deg and -179 deg average to 0) and near gimbal lock.

Lag, for a rotation at constant angular velocity omega sampled every dt:
- `SlerpSmoother(alpha)`: q <- slerp(q, new, alpha), the first-order low-pass on the group: it trails by
  (1 - alpha)/alpha samples of rotation, like its Euclidean twin.
- `WindowAverage(N)`: Markley mean of the last N rotations: (N - 1)/2 samples of lag (the window's
  middle), noise angle variance about / N for small noise.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from hotloop.errors import ConfigError


def normalize(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    n = np.linalg.norm(q, axis=-1, keepdims=True)
    if np.any(~np.isfinite(n)) or np.any(n < 1e-12):
        raise ConfigError(f"quaternion must be finite and non-zero (got {q.tolist()})")
    return np.asarray(q / n)


def multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b (apply b, then a)."""
    w1, x1, y1, z1 = np.moveaxis(np.asarray(a, dtype=np.float64), -1, 0)
    w2, x2, y2, z2 = np.moveaxis(np.asarray(b, dtype=np.float64), -1, 0)
    return np.stack(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ],
        axis=-1,
    )


def conjugate(q: np.ndarray) -> np.ndarray:
    return np.asarray(q, dtype=np.float64) * np.array([1.0, -1.0, -1.0, -1.0])


def from_axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    axis = np.asarray(axis, dtype=np.float64)
    axis = axis / np.linalg.norm(axis)
    return np.array([math.cos(angle / 2), *(math.sin(angle / 2) * axis)])


def angle_between(a: np.ndarray, b: np.ndarray) -> float:
    """Rotation angle (rad, in [0, pi]) taking a to b; the same for either sign of either."""
    # 4·atan2(|a − s·b|, |a + s·b|) (s the sign of a·b; the atan2 is a quarter of the rotation angle)
    # rather than 2·acos(|a·b|): acos is ill-conditioned
    # near 1, where a one-ulp rounding of the dot product (which differs with the CPU's vector width)
    # reads as 3e-8 rad of rotation between q and -q.
    a, b = normalize(a), normalize(b)
    s = 1.0 if float(np.dot(a, b)) >= 0.0 else -1.0
    return 4.0 * math.atan2(float(np.linalg.norm(a - s * b)), float(np.linalg.norm(a + s * b)))


def align(q: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """q or -q, whichever is on the reference's hemisphere (the same rotation, no sign flip downstream)."""
    q = np.asarray(q, dtype=np.float64)
    return -q if float(np.dot(q, reference)) < 0 else q


def slerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """Spherical interpolation from a (t = 0) to b (t = 1) along the shorter arc of the rotation group."""
    a = normalize(a)
    b = align(normalize(b), a)
    d = min(1.0, float(np.dot(a, b)))
    theta = math.acos(d)
    if theta < 1e-9:  # the same rotation: any blend is it (and sin(theta) would divide by ~0)
        return normalize(a + t * (b - a))
    s = math.sin(theta)
    return normalize((math.sin((1 - t) * theta) * a + math.sin(t * theta) * b) / s)


def average(quaternions: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Markley's weighted average: the unit eigenvector of M = sum_i w_i q_i q_i^T with the largest
    eigenvalue. It minimises the weighted sum of squared chordal distances between rotation matrices,
    and q_i q_i^T is the same for -q_i, so the signs of the inputs do not matter. The result's sign is
    chosen with a non-negative w (canonical)."""
    q = normalize(np.asarray(quaternions, dtype=np.float64).reshape(-1, 4))
    w = np.ones(len(q)) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if len(w) != len(q) or np.any(w < 0) or not w.sum() > 0:
        raise ConfigError("quaternion average: weights must be one non-negative number per quaternion")
    m = (q * w[:, None]).T @ q
    _, vectors = np.linalg.eigh(m)
    mean = vectors[:, -1]
    return canonical(mean)


def canonical(q: np.ndarray) -> np.ndarray:
    """The representative with w >= 0 (first non-zero component positive on the w = 0 boundary)."""
    q = normalize(q)
    for c in q:
        if abs(c) > 1e-12:
            return -q if c < 0 else q
    return q


class SlerpSmoother:
    """q_out <- slerp(q_out, q_in, alpha): first-order low-pass on SO(3); lag (1 - alpha)/alpha samples."""

    def __init__(self, alpha: float) -> None:
        if not 0 < alpha <= 1:
            raise ConfigError(f"slerp smoother alpha must be in (0, 1] (got {alpha})")
        self.alpha = alpha
        self._q: np.ndarray | None = None

    @property
    def delay_samples(self) -> float:
        return (1.0 - self.alpha) / self.alpha

    def reset(self, initial: np.ndarray | None = None) -> None:
        self._q = None if initial is None else normalize(initial)

    def update(self, q: np.ndarray) -> np.ndarray:
        q = normalize(q)
        self._q = q if self._q is None else slerp(self._q, q, self.alpha)
        return self._q.copy()


class WindowAverage:
    """Markley average of the last `window` rotations, output kept on the previous output's hemisphere."""

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ConfigError(f"rotation window must be >= 1 sample (got {window})")
        self.window = window
        self._buf: deque[np.ndarray] = deque(maxlen=window)
        self._last: np.ndarray | None = None

    @property
    def delay_samples(self) -> float:
        return (self.window - 1) / 2

    def reset(self, initial: np.ndarray | None = None) -> None:
        self._buf.clear()
        self._last = None
        if initial is not None:
            q = normalize(initial)
            self._buf.extend([q] * self.window)

    def update(self, q: np.ndarray) -> np.ndarray:
        q = normalize(q)
        if not self._buf:
            self._buf.extend([q] * self.window)  # start at the first sample, not a ramp from nothing
        else:
            self._buf.append(q)
        mean = average(np.stack(list(self._buf)))
        mean = align(mean, self._last if self._last is not None else q)
        self._last = mean
        return mean.copy()
