"""Causal sliding-window filters (R6.4: a window of about 3-5 control periods to start).

All three are one weighted sum over the last N samples, y[n] = sum_i c_i x[n - i] (i = 0 is the newest),
and differ only in the weights c:

- `MovingAverage(N)`: c_i = 1/N. Delay (N - 1)/2 samples; white-noise variance / N.
- `WeightedMovingAverage(weights)`: c_i = w_i / sum(w) (w_0 weighs the newest sample). Delay
  sum(i * c_i) samples; noise variance * sum(c_i^2). Linearly decaying weights (N, N-1, ..., 1) give
  (N - 1)/3 samples of delay instead of (N - 1)/2.
- `SavitzkyGolay(N, degree)`: fits a polynomial of `degree` to the window by least squares and evaluates
  it at the newest sample. It is exact on polynomials up to `degree`, so its lag on a ramp is 0
  (degree >= 1): it trades noise (variance * sum(c_i^2), larger than a mean's) for no lag.

In general, delay = sum(i * c_i) (the DC group delay) and the noise gain = sum(c_i^2); both are exposed.
Before N samples have arrived the window is padded with the first sample (or with `reset(initial)`), so
the output starts at the input instead of ramping up from zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hotloop.errors import ConfigError
from hotloop.realtime.filters.protocol import as_vector, check_finite


class WindowFilter:
    """y[n] = sum_i coefficients[i] * x[n - i] over a ring buffer of the last len(coefficients) samples."""

    def __init__(self, coefficients: Sequence[float] | np.ndarray, name: str = "window filter") -> None:
        c = np.asarray(coefficients, dtype=np.float64)
        if c.ndim != 1 or len(c) < 1 or not np.all(np.isfinite(c)):
            raise ConfigError(f"{name}: coefficients must be a non-empty 1-D finite sequence")
        self.coefficients = c
        self.name = name
        self._buf: np.ndarray | None = None  # (N, dim); row `_head` is the newest sample
        self._head = 0

    @property
    def window(self) -> int:
        return len(self.coefficients)

    @property
    def delay_samples(self) -> float:
        i = np.arange(self.window)
        return float((i * self.coefficients).sum() / self.coefficients.sum())

    @property
    def noise_gain(self) -> float:
        """Output variance / input variance for white noise."""
        return float((self.coefficients**2).sum())

    def reset(self, initial: np.ndarray | None = None) -> None:
        if initial is None:
            self._buf = None
        else:
            self._buf = np.repeat(as_vector(initial)[None, :], self.window, axis=0)
            self._head = 0

    def update(self, x: np.ndarray) -> np.ndarray:
        x = as_vector(x)
        check_finite(x, self.name)
        if self._buf is None or self._buf.shape[1:] != x.shape:
            self.reset(x)
            assert self._buf is not None
        else:
            self._head = (self._head + 1) % self.window
            self._buf[self._head] = x
        # Ages 0, 1, ..., N-1 walk backwards from the head.
        order = (self._head - np.arange(self.window)) % self.window
        return np.asarray(self.coefficients @ self._buf[order], dtype=np.float64)


class MovingAverage(WindowFilter):
    """Mean of the last `window` samples; delay (window - 1)/2 samples."""

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ConfigError(f"moving average window must be >= 1 sample (got {window})")
        super().__init__(np.full(window, 1.0 / window), "moving average")


class WeightedMovingAverage(WindowFilter):
    """Weights (newest first) normalised to sum 1; default linear decay N, N-1, ..., 1."""

    def __init__(self, window: int | None = None, weights: Sequence[float] | None = None) -> None:
        if weights is None:
            if window is None or window < 1:
                raise ConfigError(f"weighted moving average needs a window >= 1 or weights (got {window})")
            w = np.arange(window, 0, -1, dtype=np.float64)
        else:
            w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or len(w) < 1 or np.any(w < 0) or not w.sum() > 0:
            raise ConfigError("weighted moving average: weights must be non-negative with a positive sum")
        super().__init__(w / w.sum(), "weighted moving average")


class SavitzkyGolay(WindowFilter):
    """Least-squares polynomial of `degree` over the last `window` samples, evaluated at the newest.

    Exact (zero lag) on polynomials up to `degree`; `delay_samples` is 0 for degree >= 1.
    """

    def __init__(self, window: int, degree: int = 2) -> None:
        if window < 2:
            raise ConfigError(f"Savitzky-Golay window must be >= 2 samples (got {window})")
        if not 0 <= degree < window:
            raise ConfigError(f"Savitzky-Golay degree must be in [0, {window - 1}] (got {degree})")
        # Fit p(t) on ages t = 0..N-1 (t = age, newest at 0) and evaluate at t = 0: the first row of the
        # least-squares pseudo-inverse of the Vandermonde matrix.
        ages = np.arange(window, dtype=np.float64)
        vander = np.vander(ages, degree + 1, increasing=True)  # columns 1, t, t^2...
        coefficients = np.linalg.pinv(vander)[0]
        self.degree = degree
        super().__init__(coefficients, "Savitzky-Golay filter")
