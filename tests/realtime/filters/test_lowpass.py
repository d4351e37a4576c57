import math

import numpy as np
import pytest
from scipy import signal

from hotloop.errors import ConfigError
from hotloop.realtime.filters import filter_signal
from hotloop.realtime.filters.lowpass import ButterworthLowPass, FirstOrderLowPass

FS = 100.0


def _ramp_lag(f, slope: float = 0.3, n: int = 600) -> float:
    """Steady-state lag (samples) of `f` behind x[n] = slope * n."""
    x = slope * np.arange(n, dtype=np.float64)
    y = filter_signal(f, x[:, None])[:, 0]
    return float((x[-1] - y[-1]) / slope)


def test_first_order_ramp_lag_is_its_stated_delay():
    f = FirstOrderLowPass(5.0, FS)
    f.reset(np.zeros(1))
    assert _ramp_lag(f) == pytest.approx(f.delay_samples, rel=1e-6)
    assert f.delay_samples == pytest.approx((1 - f.alpha) / f.alpha)
    # ~ the time constant 1/(2 pi fc) when fc << fs
    assert f.delay_s == pytest.approx(1 / (2 * math.pi * 5.0), rel=0.2)


def test_first_order_noise_reduction_matches_theory():
    rng = np.random.default_rng(0)
    f = FirstOrderLowPass(2.0, FS)
    noise = rng.normal(0, 1, (15_000, 2))
    y = filter_signal(f, noise)[1000:]
    assert y.var(axis=0) == pytest.approx([f.noise_gain] * 2, rel=0.1)
    assert f.noise_gain < 0.07  # a 2 Hz filter at 100 Hz removes > 93% of the white-noise power


def test_first_sample_passes_through_and_reset_forgets():
    f = FirstOrderLowPass(1.0, FS)
    np.testing.assert_allclose(f.update(np.array([0.3, -0.2])), [0.3, -0.2])
    f.update(np.array([1.0, 1.0]))
    f.reset()
    np.testing.assert_allclose(f.update(np.array([5.0, 5.0])), [5.0, 5.0])


def test_butterworth_matches_scipy_sosfilt_and_starts_steady():
    rng = np.random.default_rng(1)
    x = 2.0 + rng.normal(0, 1, (300, 3))
    f = ButterworthLowPass(4.0, FS, order=4)
    f.reset(x[0])
    y = filter_signal(f, x)
    zi = signal.sosfilt_zi(f.sos)[:, :, None] * x[0][None, None, :]
    ref, _ = signal.sosfilt(f.sos, x, axis=0, zi=zi)
    np.testing.assert_allclose(y, ref, atol=1e-12)
    # Constant input after reset at that value: output equals it from the first sample (no transient).
    g = ButterworthLowPass(4.0, FS, order=2)
    g.reset(np.array([0.7]))
    np.testing.assert_allclose(filter_signal(g, np.full((20, 1), 0.7)), 0.7, atol=1e-12)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_butterworth_ramp_lag_is_its_group_delay(order):
    f = ButterworthLowPass(5.0, FS, order=order)
    f.reset(np.zeros(1))
    assert _ramp_lag(f) == pytest.approx(f.delay_samples, rel=1e-6)
    # The analog prototype's DC group delay is sum_k sin((2k-1) pi / 2n) / (2 pi fc): close at fc << fs.
    analog = sum(math.sin((2 * k - 1) * math.pi / (2 * order)) for k in range(1, order + 1)) / (
        2 * math.pi * 5.0
    )
    assert f.delay_s == pytest.approx(analog, rel=0.1)


def test_butterworth_gain_at_cutoff_and_above():
    n = np.arange(4000)
    for freq, expected in ((5.0, 1 / math.sqrt(2)), (1.0, 1.0), (20.0, None)):
        f = ButterworthLowPass(5.0, FS, order=2)
        x = np.sin(2 * math.pi * freq * n / FS)[:, None]
        y = filter_signal(f, x)[2000:, 0]
        gain = y.std() / x[2000:, 0].std()
        if expected is None:
            assert gain < 0.1  # two octaves above the cutoff: about -24 dB for order 2
        else:
            assert gain == pytest.approx(expected, abs=0.01)


def test_bad_settings_name_the_value():
    with pytest.raises(ConfigError, match="cutoff"):
        FirstOrderLowPass(60.0, FS)
    with pytest.raises(ConfigError, match="order"):
        ButterworthLowPass(5.0, FS, order=0)
    with pytest.raises(ConfigError, match="finite"):
        FirstOrderLowPass(5.0, FS).update(np.array([np.nan]))
