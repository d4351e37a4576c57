"""The one interface every vector filter here follows, and a helper to run one over a whole signal."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class StreamFilter(Protocol):
    """Sample-by-sample filter of vectors: `update(x)` returns the filtered sample for the newest input."""

    @property
    def delay_samples(self) -> float:
        """Group delay at DC (low frequencies) in samples: the lag a slow ramp sees."""
        ...

    def update(self, x: np.ndarray) -> np.ndarray: ...

    def reset(self, initial: np.ndarray | None = None) -> None:
        """Forget the history; with `initial`, start as if that value had been held forever (no transient)."""
        ...


class MotionReadout:
    """`position` and `velocity` read as copies of rows 0 and 1 of a tracker's state (`_state()`, which
    raises while there is none): the Kalman tracker's, the chunk interpolator's."""

    def _state(self) -> Any:
        raise NotImplementedError

    @property
    def position(self) -> np.ndarray:
        return self._state()[0].copy()

    @property
    def velocity(self) -> np.ndarray:
        return self._state()[1].copy()


def filter_signal(f: StreamFilter, signal: np.ndarray) -> np.ndarray:
    """Run `f` over `signal` (T, ...) one sample at a time; returns (T, ...) outputs."""
    signal = np.asarray(signal, dtype=np.float64)
    return np.stack([f.update(x) for x in signal])


def as_vector(x: np.ndarray | float) -> np.ndarray:
    """Samples are float64 arrays (a scalar becomes shape (1,)), so every filter handles any dimension."""
    arr = np.asarray(x, dtype=np.float64)
    return arr.reshape(1) if arr.ndim == 0 else arr


def check_finite(x: np.ndarray, who: str) -> None:
    if not np.all(np.isfinite(x)):
        from hotloop.errors import ConfigError

        raise ConfigError(f"{who}: input sample must be finite (got {np.asarray(x).tolist()})")
