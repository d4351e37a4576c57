"""Control-rate interpolation: action chunks at the policy rate to commands at the control rate.

A policy predicts one target per policy period (10-50 Hz); motors want a command every control period
(100 Hz-1 kHz). `ChunkInterpolator` turns each chunk into `ratio = control_hz / policy_hz` commands per
action and enforces per-axis velocity and acceleration limits on what it emits:

1. Reference. Knots at t = 0 (where the commands are now) and t = (i + 1) * T for action i (T the policy
   period: action i is reached at the end of its period, as a position controller holding it would). The
   reference between knots is linear, or a cubic Hermite spline whose tangents are central differences
   (Catmull-Rom), the current command velocity at t = 0 (no velocity jump at a chunk boundary) and a
   one-sided difference at the end. Cubic removes the velocity kinks of linear at every knot.
2. Limits. Each command moves towards its reference sample by a velocity that is (a) within
   `max_velocity`, (b) within `max_acceleration * dt` of the previous velocity and (c) slow enough to stop
   on the chunk's endpoint with `max_acceleration` (the discrete braking curve): if no further chunk
   arrives, the robot stops on the last target instead of overshooting it. Positions are
   integrated from those velocities, so the finite differences of the commands never exceed the limits.
   When the reference respects the limits, the commands are the reference samples exactly, and the last
   one is the chunk's last action (its endpoint); when it does not, the commands trail it and reach the
   endpoint as soon as the limits allow (`hold` keeps stepping towards the last target).

Lag: none for a feasible reference (commands equal it sample for sample); the linear reference itself
reaches action i one policy period after it was due to start, which is the position-controller convention
the simulator already follows (an action is the target held for its period).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hotloop.errors import ConfigError
from hotloop.realtime.filters.protocol import MotionReadout

METHODS = ("linear", "cubic")


@dataclass(frozen=True)
class InterpolationConfig:
    policy_hz: float = 10.0
    control_hz: float = 500.0
    method: str = "linear"
    max_velocity: tuple[float, ...] | float = math.inf  # units per second, per axis or one for all
    max_acceleration: tuple[float, ...] | float = math.inf  # units per second^2

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(
                f"interpolation method {self.method!r} is not known; use {' or '.join(METHODS)}"
            )
        if not 100 <= self.control_hz <= 1000:
            raise ConfigError(f"control_hz must be in [100, 1000] Hz (got {self.control_hz})")
        if not 0 < self.policy_hz <= self.control_hz:
            raise ConfigError(
                f"policy_hz must be in (0, control_hz={self.control_hz:g}] (got {self.policy_hz})"
            )
        ratio = self.control_hz / self.policy_hz
        if abs(ratio - round(ratio)) > 1e-9:
            raise ConfigError(
                f"control_hz / policy_hz must be a whole number (got {self.control_hz:g} / {self.policy_hz:g})"
            )
        for name in ("max_velocity", "max_acceleration"):
            v = np.asarray(getattr(self, name), dtype=np.float64)
            if v.ndim > 1 or np.any(np.isnan(v)) or np.any(v <= 0):
                raise ConfigError(f"{name} must be > 0 (one number or one per axis; inf for none), got {v}")

    @property
    def ratio(self) -> int:
        return round(self.control_hz / self.policy_hz)

    @property
    def dt(self) -> float:
        return 1.0 / self.control_hz


class ChunkInterpolator(MotionReadout):
    """Stateful: keeps the last command and its velocity, so limits hold across chunk boundaries."""

    def __init__(self, config: InterpolationConfig) -> None:
        self.config = config
        self._p: np.ndarray | None = None
        self._v: np.ndarray | None = None
        self._target: np.ndarray | None = None
        self.limited_steps = 0  # commands that had to leave the reference (the reference was infeasible)

    def reset(self, position: np.ndarray, velocity: np.ndarray | None = None) -> None:
        """Start from `position` (the robot's current command) moving at `velocity` (default at rest)."""
        self._p = np.asarray(position, dtype=np.float64).copy()
        self._v = (
            np.zeros_like(self._p) if velocity is None else np.asarray(velocity, dtype=np.float64).copy()
        )
        self._target = self._p.copy()
        self.limited_steps = 0
        dim = len(self._p)
        self._vmax = np.broadcast_to(np.asarray(self.config.max_velocity, dtype=np.float64), (dim,)).copy()
        self._amax = np.broadcast_to(
            np.asarray(self.config.max_acceleration, dtype=np.float64), (dim,)
        ).copy()
        self._braking = np.isfinite(self._amax)  # axes with an acceleration limit need the braking curve
        self._amax_finite = np.where(self._braking, self._amax, 1.0)

    def _state(self) -> tuple[np.ndarray, np.ndarray]:
        if self._p is None or self._v is None:
            raise ConfigError("the interpolator needs reset(position) before its first chunk")
        return self._p, self._v

    def reference(self, chunk: np.ndarray) -> np.ndarray:
        """The unlimited reference (H * ratio, D) for `chunk` (H, D) from the current command."""
        p, v = self._state()
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != p.shape[0] or len(chunk) < 1:
            raise ConfigError(f"chunk must have shape (horizon, {p.shape[0]}) (got {chunk.shape})")
        if not np.all(np.isfinite(chunk)):
            raise ConfigError("chunk must be finite")
        period = 1.0 / self.config.policy_hz
        knots = np.concatenate([p[None], chunk])  # (H + 1, D) at t = 0, T, 2T, ...
        n = len(chunk) * self.config.ratio
        s = (np.arange(1, n + 1) / self.config.ratio).astype(np.float64)  # time in policy periods
        seg = np.minimum(np.floor(s - 1e-12).astype(int), len(chunk) - 1)
        u = (s - seg)[:, None]  # in (0, 1]
        a, b = knots[seg], knots[seg + 1]
        if self.config.method == "linear":
            return np.asarray(a + u * (b - a))
        tangents = np.empty_like(knots)  # per policy period
        tangents[0] = v * period
        if len(knots) > 2:
            tangents[1:-1] = (knots[2:] - knots[:-2]) / 2
        tangents[-1] = knots[-1] - knots[-2]
        ma, mb = tangents[seg], tangents[seg + 1]
        h00 = 2 * u**3 - 3 * u**2 + 1
        h10 = u**3 - 2 * u**2 + u
        h01 = -2 * u**3 + 3 * u**2
        h11 = u**3 - u**2
        return np.asarray(h00 * a + h10 * ma + h01 * b + h11 * mb)

    def commands(self, chunk: np.ndarray) -> np.ndarray:
        """Commands (H * ratio, D) for one chunk, within the limits, continuing from the last command."""
        ref = self.reference(chunk)
        self._target = ref[-1].copy()  # the endpoint the braking curve protects
        return np.stack([self.step(r) for r in ref])

    def hold(self, steps: int) -> np.ndarray:
        """`steps` more commands towards the last target (after a chunk whose end was out of reach)."""
        self._state()
        assert self._target is not None
        return np.stack([self.step(self._target) for _ in range(steps)])

    def step(self, target: np.ndarray) -> np.ndarray:
        """One command towards `target`, within the velocity and acceleration limits, and slow enough to
        stop on the chunk's endpoint (the last target) if no further chunk arrives."""
        p, v = self._state()
        assert self._target is not None
        dt = self.config.dt
        vmax, amax = self._vmax, self._amax
        follow = (np.asarray(target, dtype=np.float64) - p) / dt  # the velocity that lands on the target
        to_end = self._target - p
        # Fastest speed from which the distance to the endpoint can still be braked away in whole steps:
        # v^2 / (2a) + v * dt / 2 = |d|  ->  v = a * (sqrt(dt^2/4 + 2|d|/a) - dt/2).
        a = self._amax_finite
        brake = np.where(self._braking, a * (np.sqrt(dt * dt / 4 + 2 * np.abs(to_end) / a) - dt / 2), np.inf)
        towards_end = np.sign(follow) == np.sign(to_end)
        cap = np.where(towards_end, np.minimum(vmax, brake), vmax)
        # np.minimum/maximum rather than np.clip: a few microseconds a call matter at 1 kHz.
        wanted = np.maximum(np.minimum(follow, cap), -cap)
        dv_max = amax * dt
        new_v = v + np.maximum(np.minimum(wanted - v, dv_max), -dv_max)
        new_v = np.maximum(np.minimum(new_v, vmax), -vmax)
        if np.any(np.abs(new_v - follow) > 1e-9):
            self.limited_steps += 1
        self._v = new_v
        self._p = p + new_v * dt
        return self._p.copy()
