import math

import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.realtime.filters import so3


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    return so3.normalize(rng.normal(size=4))


def _noisy(center: np.ndarray, std: float, n: int, rng: np.random.Generator) -> np.ndarray:
    out = []
    for _ in range(n):
        axis = rng.normal(size=3)
        out.append(so3.multiply(center, so3.from_axis_angle(axis, rng.normal(0, std))))
    return np.asarray(out)


def test_average_is_blind_to_the_double_cover():
    rng = np.random.default_rng(0)
    center = _random_rotation(rng)
    samples = _noisy(center, 0.05, 200, rng)
    flipped = samples * np.where(rng.random(200) < 0.5, -1.0, 1.0)[:, None]
    mean = so3.average(flipped)
    assert so3.angle_between(mean, center) < 0.02
    np.testing.assert_allclose(mean, so3.average(samples), atol=1e-12)
    # The naive component mean of the sign-flipped set is nowhere near (often not even a rotation).
    naive = flipped.mean(axis=0)
    assert np.linalg.norm(naive) < 0.5


def test_average_reduces_noise_and_weights_matter():
    rng = np.random.default_rng(1)
    center = so3.from_axis_angle(np.array([0.0, 0.0, 1.0]), 3.1)  # near pi: Euler angles would wrap here
    samples = _noisy(center, 0.1, 50, rng)
    single = np.mean([so3.angle_between(s, center) for s in samples])
    assert so3.angle_between(so3.average(samples), center) < single / 3
    a, b = so3.from_axis_angle(np.array([1.0, 0, 0]), 0.0), so3.from_axis_angle(np.array([1.0, 0, 0]), 0.6)
    assert so3.angle_between(so3.average(np.stack([a, b]), np.array([3.0, 1.0])), a) < 0.3


def test_slerp_takes_the_short_way_across_the_sign_flip():
    a = so3.from_axis_angle(np.array([0.0, 0, 1]), 0.2)
    b = -so3.from_axis_angle(np.array([0.0, 0, 1]), 0.6)  # the same rotation as +q, opposite hemisphere
    mid = so3.slerp(a, b, 0.5)
    assert so3.angle_between(mid, so3.from_axis_angle(np.array([0.0, 0, 1]), 0.4)) < 1e-9
    assert so3.angle_between(so3.slerp(a, b, 0.0), a) < 1e-9
    assert so3.angle_between(so3.slerp(a, b, 1.0), b) < 1e-9
    # Across +-pi about z: the short arc passes through pi, not back through 0.
    c, d = so3.from_axis_angle(np.array([0.0, 0, 1]), 3.0), so3.from_axis_angle(np.array([0.0, 0, 1]), -3.0)
    assert so3.angle_between(so3.slerp(c, d, 0.5), so3.from_axis_angle(np.array([0.0, 0, 1]), math.pi)) < 1e-9


@pytest.mark.parametrize("alpha", [0.2, 0.5])
def test_slerp_smoother_lags_a_constant_rotation_rate_by_its_delay(alpha):
    omega = 0.02  # rad per sample about a fixed axis
    axis = np.array([0.3, -0.5, 0.8])
    f = so3.SlerpSmoother(alpha)
    for n in range(300):
        q = so3.from_axis_angle(axis, omega * n) * (-1 if n % 3 == 0 else 1)  # random-looking signs
        out = f.update(q)
    lag = so3.angle_between(out, so3.from_axis_angle(axis, omega * 299)) / omega
    assert lag == pytest.approx(f.delay_samples, rel=1e-3)


def test_window_average_lag_noise_and_sign_continuity():
    rng = np.random.default_rng(2)
    axis = np.array([0.0, 1.0, 0.0])
    omega = 0.01
    f = so3.WindowAverage(5)
    outs = []
    for n in range(100):
        outs.append(f.update(so3.from_axis_angle(axis, omega * n) * (-1) ** n))
    lag = so3.angle_between(outs[-1], so3.from_axis_angle(axis, omega * 99)) / omega
    assert lag == pytest.approx(f.delay_samples, rel=1e-3)
    dots = [float(np.dot(a, b)) for a, b in zip(outs, outs[1:], strict=False)]
    assert min(dots) > 0.99  # consecutive outputs never flip sign, although every input did
    center = _random_rotation(rng)
    g = so3.WindowAverage(8)
    errs = [so3.angle_between(g.update(q), center) for q in _noisy(center, 0.05, 400, rng)][8:]
    raw = [so3.angle_between(q, center) for q in _noisy(center, 0.05, 400, rng)]
    assert np.mean(errs) < 0.5 * np.mean(raw)


def test_bad_quaternions():
    with pytest.raises(ConfigError, match="non-zero"):
        so3.normalize(np.zeros(4))
    with pytest.raises(ConfigError, match="alpha"):
        so3.SlerpSmoother(0.0)


def test_angle_between_is_accurate_for_tiny_rotations():
    # acos(|a·b|) cannot resolve angles below ~3e-8 rad (one ulp of the dot product near 1); the atan2
    # form measures them, for either sign of either quaternion.
    q = so3.from_axis_angle(np.array([0.3, -0.5, 0.8]), 0.7)
    for angle in (1e-9, 1e-6, 1e-3):
        r = so3.multiply(q, so3.from_axis_angle(np.array([1.0, 0, 0]), angle))
        assert so3.angle_between(q, r) == pytest.approx(angle, rel=1e-6)
        assert so3.angle_between(q, -r) == pytest.approx(angle, rel=1e-6)
    assert so3.angle_between(q, -q) == 0.0
