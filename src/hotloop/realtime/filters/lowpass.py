"""Low-pass filters on actions against step-to-step jitter (R6.3): first-order and Butterworth.

Both are streaming (one sample per `update`) and keep their state between calls; `reset(initial)` starts
them in steady state at `initial`, so the first command out equals the first command in instead of
ramping up from zero (which on a robot is a lurch towards the origin).

Lag (group delay at DC, what a slow ramp sees):
- first-order, smoothing factor a = 1 - exp(-2*pi*fc*dt): (1 - a) / a samples, i.e. about
  1 / (2*pi*fc) seconds (the time constant) when fc << fs.
- Butterworth of order n: the analog prototype's DC group delay is sum_k sin((2k-1)*pi/(2n)) / (2*pi*fc)
  seconds (each pole contributes Re(-p)/|p|^2): sqrt(2)/(2*pi*fc) for n = 2. The digital filter's exact
  value is computed from its coefficients and exposed as `delay_samples`. A 2nd-order 5 Hz filter at
  100 Hz lags about 4.5 samples (45 ms): the price of its -40 dB/decade above 5 Hz.
"""

from __future__ import annotations

import math

import numpy as np

from hotloop.errors import ConfigError
from hotloop.realtime.filters.protocol import as_vector, check_finite


def _check_rate(cutoff_hz: float, sample_hz: float) -> None:
    if not sample_hz > 0:
        raise ConfigError(f"sample rate must be > 0 Hz (got {sample_hz})")
    if not 0 < cutoff_hz < sample_hz / 2:
        raise ConfigError(
            f"cutoff must be in (0, {sample_hz / 2:g}) Hz, below Nyquist for {sample_hz:g} Hz (got {cutoff_hz})"
        )


class FirstOrderLowPass:
    """y[n] = y[n-1] + a * (x[n] - y[n-1]), a = 1 - exp(-2*pi*cutoff/sample_rate).

    Delay (1 - a) / a samples: also the exact steady-state lag behind a ramp. White-noise variance is
    multiplied by a / (2 - a).
    """

    def __init__(self, cutoff_hz: float, sample_hz: float) -> None:
        _check_rate(cutoff_hz, sample_hz)
        self.cutoff_hz = cutoff_hz
        self.sample_hz = sample_hz
        self.alpha = 1.0 - math.exp(-2.0 * math.pi * cutoff_hz / sample_hz)
        self._y: np.ndarray | None = None

    @property
    def delay_samples(self) -> float:
        return (1.0 - self.alpha) / self.alpha

    @property
    def delay_s(self) -> float:
        return self.delay_samples / self.sample_hz

    @property
    def noise_gain(self) -> float:
        """Output variance / input variance for white noise."""
        return self.alpha / (2.0 - self.alpha)

    def reset(self, initial: np.ndarray | None = None) -> None:
        self._y = None if initial is None else as_vector(initial).copy()

    def update(self, x: np.ndarray) -> np.ndarray:
        x = as_vector(x)
        check_finite(x, "low-pass filter")
        if self._y is None:
            self._y = x.copy()  # the first sample starts the filter in steady state
        else:
            self._y = self._y + self.alpha * (x - self._y)
        return self._y.copy()


class ButterworthLowPass:
    """Butterworth low-pass of order `order`, as cascaded second-order sections (numerically safe at low
    cutoffs), direct form II transposed, run one vector sample at a time.

    `delay_samples` is the exact DC group delay of the digital filter: -d(phase)/d(omega) at omega = 0,
    which for a unit-DC-gain filter equals the steady-state lag behind a ramp, in samples.
    """

    def __init__(self, cutoff_hz: float, sample_hz: float, order: int = 2) -> None:
        _check_rate(cutoff_hz, sample_hz)
        if not 1 <= order <= 8:
            raise ConfigError(f"Butterworth order must be in [1, 8] (got {order})")
        from scipy import signal

        self.cutoff_hz = cutoff_hz
        self.sample_hz = sample_hz
        self.order = order
        self.sos = signal.butter(order, cutoff_hz, btype="low", fs=sample_hz, output="sos")
        # Steady-state section states for a unit step: scaled by the initial value at reset.
        self._zi_unit = signal.sosfilt_zi(self.sos)  # (sections, 2)
        self._z: np.ndarray | None = None  # (sections, 2, dim)
        self._delay = _dc_group_delay(self.sos)

    @property
    def delay_samples(self) -> float:
        return self._delay

    @property
    def delay_s(self) -> float:
        return self._delay / self.sample_hz

    def reset(self, initial: np.ndarray | None = None) -> None:
        self._z = None if initial is None else self._zi_unit[:, :, None] * as_vector(initial)[None, None, :]

    def update(self, x: np.ndarray) -> np.ndarray:
        x = as_vector(x)
        check_finite(x, "Butterworth filter")
        if self._z is None or self._z.shape[2] != x.shape[0]:
            self.reset(x)
        assert self._z is not None
        y = x
        for k, (b0, b1, b2, _a0, a1, a2) in enumerate(self.sos):
            z = self._z[k]
            out = b0 * y + z[0]
            z[0] = b1 * y - a1 * out + z[1]
            z[1] = b2 * y - a2 * out
            y = out
        return np.array(y, dtype=np.float64)


def _dc_group_delay(sos: np.ndarray) -> float:
    """Sum over sections of the DC group delay of B(z)/A(z): (sum k b_k)/(sum b_k) - (sum k a_k)/(sum a_k)."""
    total = 0.0
    k = np.arange(3)
    for section in sos:
        b, a = section[:3], section[3:]
        if abs(b.sum()) > 0:
            total += float((k * b).sum() / b.sum())
        total -= float((k * a).sum() / a.sum())
    return total
