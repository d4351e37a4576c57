import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.realtime.filters import filter_signal
from hotloop.realtime.filters.window import MovingAverage, SavitzkyGolay, WeightedMovingAverage


def _ramp(n: int = 50, slope: float = 0.5) -> np.ndarray:
    return (slope * np.arange(n, dtype=np.float64))[:, None]


@pytest.mark.parametrize("window", [1, 3, 5, 8])
def test_moving_average_lags_half_its_window_and_divides_noise(window):
    f = MovingAverage(window)
    x = _ramp()
    y = filter_signal(f, x)
    assert f.delay_samples == pytest.approx((window - 1) / 2)
    assert (x[-1, 0] - y[-1, 0]) / 0.5 == pytest.approx(f.delay_samples)
    assert f.noise_gain == pytest.approx(1 / window)
    rng = np.random.default_rng(window)
    noise = filter_signal(MovingAverage(window), rng.normal(0, 1, (8_000, 1)))
    assert noise[window:].var() == pytest.approx(1 / window, rel=0.1)


def test_weighted_average_linear_weights_lag_a_third():
    f = WeightedMovingAverage(7)
    assert f.delay_samples == pytest.approx((7 - 1) / 3)
    x = _ramp()
    y = filter_signal(f, x)
    assert (x[-1, 0] - y[-1, 0]) / 0.5 == pytest.approx(2.0)
    assert f.noise_gain == pytest.approx(sum(w * w for w in range(1, 8)) / 28**2)


def test_savitzky_golay_has_no_lag_on_polynomials_of_its_degree():
    t = np.arange(40, dtype=np.float64)
    quad = (0.01 * t**2 - 0.3 * t + 2.0)[:, None]
    f = SavitzkyGolay(7, 2)
    y = filter_signal(f, quad)
    np.testing.assert_allclose(y[7:], quad[7:], atol=1e-9)  # exact once the window is full
    assert f.delay_samples == pytest.approx(0.0, abs=1e-9)
    # Degree 1 on a quadratic does lag; degree 2 trades that for more noise than a mean of 7.
    assert abs(filter_signal(SavitzkyGolay(7, 1), quad)[-1, 0] - quad[-1, 0]) > 0.04
    assert MovingAverage(7).noise_gain < f.noise_gain < 1.0


def test_windows_start_at_the_first_sample_and_reset():
    f = MovingAverage(4)
    np.testing.assert_allclose(f.update(np.array([2.0, 3.0])), [2.0, 3.0])
    f.update(np.array([6.0, 7.0]))
    f.reset(np.array([1.0, 1.0]))
    np.testing.assert_allclose(f.update(np.array([5.0, 5.0])), [2.0, 2.0])


def test_bad_windows():
    with pytest.raises(ConfigError, match="window"):
        MovingAverage(0)
    with pytest.raises(ConfigError, match="degree"):
        SavitzkyGolay(3, 3)
    with pytest.raises(ConfigError, match="weights"):
        WeightedMovingAverage(weights=[-1.0, 2.0])
