"""Kalman trackers for moving targets (R6.4): constant velocity (CV) or constant acceleration (CA).

The state per axis is [position, velocity] (CV) or [position, velocity, acceleration] (CA); axes are
independent 1-D filters of the same model, each with its own covariance. Process noise is the continuous
white-noise model: white acceleration of spectral density `process_noise` (m^2/s^3) for CV, white jerk
for CA, one number or one per axis (a target known to move along one axis — a box on a belt — gets a
small one on the others); the measurement is the position with standard deviation `measurement_std`.
A measurement may cover only some axes (`update(t, z, axes=mask)`): a partly hidden target whose
centroid is still good along one axis.

Time is explicit: `update(t, z)` predicts from the last time to `t` and then corrects with `z` (or only
predicts when `z` is None: an occluded or missed detection), so irregular camera frames and dropped
ones are handled. `predict_to(t)` returns the estimate at a later time without changing the filter,
which is how an estimation layer compensates a known downstream latency (predict to when the action
will run, not to when the image was taken).

Lag: a Kalman filter is not a fixed delay. Its steady-state error is zero for the motion its model
assumes — a CV tracker follows a constant velocity (a ramp) with no lag, a CA tracker a constant
acceleration — and lags a motion of the next order: a CV tracker behind a constant acceleration a,
measured every dt, settles at a constant position error of a * dt * (1 - k[0]) / k[1] (k the
steady-state gain, `steady_state_gain`: k[0] on position, k[1] on velocity in 1/s). Noise: the steady-state position variance is the Riccati
solution's P[0, 0], below `measurement_std**2` whenever the motion model is trusted
(`process_noise` small).

`gate` (a chi-square bound on the normalised innovation) rejects outliers — a detection on the wrong
blob — and counts them (`rejected`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hotloop.errors import ConfigError
from hotloop.realtime.filters.protocol import MotionReadout

MODELS = ("cv", "ca")


@dataclass(frozen=True)
class KalmanConfig:
    model: str = "cv"  # "cv" (constant velocity) or "ca" (constant acceleration)
    dim: int = 3  # position axes
    process_noise: float | tuple[float, ...] = 1e-2  # white acceleration (cv) / jerk (ca) density, per axis
    measurement_std: float = 0.005  # position measurement standard deviation
    initial_velocity_std: float | tuple[float, ...] = 1.0  # prior on the unseen velocity at the first fix
    initial_velocity: float | tuple[float, ...] = 0.0  # its mean (a conveyor's nominal speed, say)
    gate: float | None = (
        None  # reject a measurement whose normalised innovation exceeds this (chi^2, dim dof)
    )

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ConfigError(f"Kalman model {self.model!r} is not known; use one of {', '.join(MODELS)}")
        if self.dim < 1:
            raise ConfigError(f"Kalman dim must be >= 1 (got {self.dim})")
        for name in ("process_noise", "measurement_std", "initial_velocity_std"):
            v = np.asarray(getattr(self, name), dtype=np.float64)
            if v.ndim > 1 or (v.ndim == 1 and len(v) != self.dim) or not np.all(v > 0):
                raise ConfigError(
                    f"Kalman {name} must be > 0, one number or {self.dim} (got {getattr(self, name)})"
                )
        v = np.asarray(self.initial_velocity, dtype=np.float64)
        if v.ndim > 1 or (v.ndim == 1 and len(v) != self.dim) or not np.all(np.isfinite(v)):
            raise ConfigError(f"Kalman initial_velocity must be finite, one number or {self.dim}")
        if self.gate is not None and not self.gate > 0:
            raise ConfigError(f"Kalman gate must be > 0 or None (got {self.gate})")

    @property
    def order(self) -> int:
        return 2 if self.model == "cv" else 3

    def per_axis(self, name: str) -> np.ndarray:
        return np.broadcast_to(np.asarray(getattr(self, name), dtype=np.float64), (self.dim,)).copy()


def _transition(order: int, dt: float) -> np.ndarray:
    if order == 2:
        return np.array([[1.0, dt], [0.0, 1.0]])
    return np.array([[1.0, dt, dt * dt / 2], [0.0, 1.0, dt], [0.0, 0.0, 1.0]])


def _process(order: int, dt: float, q: float) -> np.ndarray:
    if order == 2:
        return q * np.array([[dt**3 / 3, dt**2 / 2], [dt**2 / 2, dt]])
    return q * np.array(
        [
            [dt**5 / 20, dt**4 / 8, dt**3 / 6],
            [dt**4 / 8, dt**3 / 3, dt**2 / 2],
            [dt**3 / 6, dt**2 / 2, dt],
        ]
    )


class KalmanTracker(MotionReadout):
    """Tracks position (and its derivatives) of one target from noisy, possibly missing positions."""

    def __init__(self, config: KalmanConfig | None = None) -> None:
        self.config = config or KalmanConfig()
        self._x: np.ndarray | None = None  # (order, dim): row 0 position, row 1 velocity, ...
        self._p: np.ndarray | None = None  # (dim, order, order): one covariance per axis
        self._q = self.config.per_axis("process_noise")
        self._t: float | None = None
        self.rejected = 0
        self.updates = 0

    def reset(self) -> None:
        """Forget the estimate (the `rejected` and `updates` counters run on: they count a lifetime)."""
        self._x = self._p = self._t = None

    @property
    def initialized(self) -> bool:
        return self._x is not None

    @property
    def time(self) -> float | None:
        return self._t

    @property
    def covariance(self) -> np.ndarray:
        """State covariance per axis, (dim, order, order)."""
        self._state()
        assert self._p is not None
        return self._p.copy()

    @property
    def velocity_std(self) -> np.ndarray:
        """Standard deviation of the velocity estimate per axis."""
        return np.sqrt(self.covariance[:, 1, 1])

    def _state(self) -> np.ndarray:
        if self._x is None:
            raise ConfigError("the Kalman tracker has no estimate yet: give it a first measurement")
        return self._x

    def _predicted(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        assert self._x is not None and self._p is not None and self._t is not None
        dt = t - self._t
        if dt < 0:
            raise ConfigError(f"Kalman tracker: time went backwards ({t} < {self._t})")
        f = _transition(self.config.order, dt)
        q = _process(self.config.order, dt, 1.0)[None] * self._q[:, None, None]
        return f @ self._x, f @ self._p @ f.T + q

    def predict_to(self, t: float) -> np.ndarray:
        """Estimated position at time `t` (>= the last update), without changing the filter."""
        x, _ = self._predicted(t)
        return x[0].copy()

    def state_at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(position, velocity) extrapolated to `t` without changing the filter."""
        x, _ = self._predicted(t)
        return x[0].copy(), x[1].copy()

    def update(self, t: float, z: np.ndarray | None, axes: np.ndarray | None = None) -> bool:
        """Advance to time `t` and fuse position `z` (None: predict only) on the axes where `axes` (a bool
        mask, default all) is true. Returns whether `z` was used."""
        cfg = self.config
        if not math.isfinite(t):
            raise ConfigError(f"Kalman tracker: time must be finite (got {t})")
        mask = np.ones(cfg.dim, dtype=bool) if axes is None else np.asarray(axes, dtype=bool).reshape(cfg.dim)
        if self._x is None:
            if z is None or not mask.all():
                return False  # a first fix needs every axis
            z = np.asarray(z, dtype=np.float64).reshape(cfg.dim)
            self._x = np.zeros((cfg.order, cfg.dim))
            self._x[0] = z
            self._x[1] = cfg.per_axis("initial_velocity")
            v0 = cfg.per_axis("initial_velocity_std")
            self._p = np.stack([np.diag([cfg.measurement_std**2] + [v**2] * (cfg.order - 1)) for v in v0])
            self._t = float(t)
            self.updates += 1
            return True
        x, p = self._predicted(float(t))
        self._t = float(t)
        used = False
        if z is not None and mask.any():
            z = np.asarray(z, dtype=np.float64).reshape(cfg.dim)
            if not np.all(np.isfinite(z[mask])):
                raise ConfigError(f"Kalman tracker: measurement must be finite (got {z.tolist()})")
            r = cfg.measurement_std**2
            s = p[:, 0, 0] + r  # (dim,) innovation variance per axis
            innovation = z - x[0]
            if cfg.gate is not None and float((innovation[mask] ** 2 / s[mask]).sum()) > cfg.gate:
                self.rejected += 1
            else:
                k = p[:, :, 0] / s[:, None]  # (dim, order) gain per axis
                k[~mask] = 0.0
                x = x + (k * np.where(mask, innovation, 0.0)[:, None]).T
                p = p - k[:, :, None] * p[:, None, 0, :]
                p = (p + p.transpose(0, 2, 1)) / 2  # keep it symmetric against round-off
                used = True
                self.updates += 1
        self._x, self._p = x, p
        return used

    def steady_state_gain(self, dt: float, axis: int = 0, iterations: int = 10_000) -> np.ndarray:
        """The gain a tracker fed every `dt` seconds converges to on `axis` (iterating the Riccati recursion)."""
        cfg = self.config
        f = _transition(cfg.order, dt)
        q = _process(cfg.order, dt, float(self._q[axis]))
        r = cfg.measurement_std**2
        p = np.eye(cfg.order)
        k = np.zeros(cfg.order)
        for _ in range(iterations):
            p = f @ p @ f.T + q
            k_new = p[:, 0] / (p[0, 0] + r)
            p = p - np.outer(k_new, p[0])
            if np.allclose(k_new, k, rtol=0, atol=1e-15):
                break
            k = k_new
        return k_new

    def steady_state_variance(self, dt: float, axis: int = 0) -> float:
        """Steady-state (posterior) position variance on `axis` for measurements every `dt` seconds."""
        k = self.steady_state_gain(dt, axis)
        # Posterior P00 = (1 - k0) * prior P00 and k0 = prior P00 / (prior P00 + r) -> P00 = k0 * r.
        return float(k[0] * self.config.measurement_std**2)
