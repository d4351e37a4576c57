import numpy as np
import pytest

from hotloop.measure.stats import LatencyStats


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_percentiles_agree_with_numpy(seed):
    rng = np.random.default_rng(seed)
    samples = rng.lognormal(mean=1.0, sigma=0.5, size=257)
    stats = LatencyStats.from_samples(samples.tolist())
    for q, name in ((50, "p50"), (90, "p90"), (95, "p95"), (99, "p99")):
        assert getattr(stats, name) == pytest.approx(np.percentile(samples, q), rel=0, abs=1e-12)
    assert stats.max == samples.max()
    assert stats.mean == pytest.approx(samples.mean())
    assert stats.std == pytest.approx(samples.std())


def test_jitter_flag_follows_p95_over_p50():
    steady = LatencyStats.from_samples([10.0] * 100)
    assert not steady.jitter_warning
    # 10% of iterations at 20 ms: p95 = 20 > 1.5 * 10.
    jittery = LatencyStats.from_samples([10.0] * 90 + [20.0] * 10)
    assert jittery.p50 == 10.0 and jittery.p95 == 20.0
    assert jittery.jitter_warning


def test_control_rates():
    stats = LatencyStats.from_samples([10.0] * 99 + [50.0])
    assert stats.rate_hz_p50 == pytest.approx(100.0)
    assert stats.rate_hz_p99 == pytest.approx(1000.0 / np.percentile([10.0] * 99 + [50.0], 99))


def test_empty_sample_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        LatencyStats.from_samples([])
