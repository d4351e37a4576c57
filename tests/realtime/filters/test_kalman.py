import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.realtime.filters.kalman import KalmanConfig, KalmanTracker

DT = 0.05


def _track(tracker: KalmanTracker, truth: np.ndarray, noise_std: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = []
    for i, p in enumerate(truth):
        tracker.update(i * DT, p + rng.normal(0, noise_std, p.shape) if noise_std else p)
        out.append(tracker.position)
    return np.asarray(out)


def test_cv_tracks_constant_velocity_with_no_steady_state_error():
    t = np.arange(400) * DT
    truth = np.stack([0.12 * t - 0.4, -0.03 * t, 0.08 + 0 * t], axis=1)
    trk = KalmanTracker(KalmanConfig("cv", 3, process_noise=1e-3, measurement_std=0.005))
    est = _track(trk, truth, 0.0)
    np.testing.assert_allclose(est[-1], truth[-1], atol=1e-6)
    np.testing.assert_allclose(trk.velocity, [0.12, -0.03, 0.0], atol=1e-5)


def test_cv_lags_acceleration_by_the_stated_bias_and_ca_does_not():
    a = 0.4
    t = np.arange(600) * DT
    truth = (0.5 * a * t**2)[:, None]
    cv = KalmanTracker(KalmanConfig("cv", 1, process_noise=1e-2, measurement_std=0.01))
    est = _track(cv, truth, 0.0)
    k = cv.steady_state_gain(DT)
    expected_lag = a * DT * (1 - k[0]) / k[1]
    assert truth[-1, 0] - est[-1, 0] == pytest.approx(expected_lag, rel=1e-4)
    assert expected_lag > 1e-3  # a real lag, not a rounding error
    ca = KalmanTracker(KalmanConfig("ca", 1, process_noise=1e-2, measurement_std=0.01))
    est = _track(ca, truth, 0.0)
    assert abs(truth[-1, 0] - est[-1, 0]) < 1e-6


def test_noise_reduction_matches_the_riccati_variance():
    # A target that moves exactly as the model says (white acceleration of density q): the tracker's
    # error variance must then be the Riccati solution, a known answer.
    q, r = 1e-3, 0.01
    rng = np.random.default_rng(3)
    n = 8000
    f = np.array([[1.0, DT], [0.0, 1.0]])
    cov = q * np.array([[DT**3 / 3, DT**2 / 2], [DT**2 / 2, DT]])
    w = rng.multivariate_normal(np.zeros(2), cov, size=(n, 2))  # (n, axis, [p, v])
    state = np.zeros((2, 2))
    state[:, 1] = 0.1
    truth = []
    for i in range(n):
        state = state @ f.T + w[i]
        truth.append(state[:, 0].copy())
    truth = np.asarray(truth)
    trk = KalmanTracker(KalmanConfig("cv", 2, process_noise=q, measurement_std=r))
    err = _track(trk, truth, r, seed=4)[500:] - truth[500:]
    predicted = trk.steady_state_variance(DT)
    assert err.var(axis=0) == pytest.approx([predicted] * 2, rel=0.1)
    assert predicted < 0.5 * r**2  # the tracker removes more than half of the noise power


def test_missing_measurements_are_predicted_and_future_is_extrapolated():
    trk = KalmanTracker(KalmanConfig("cv", 1, process_noise=1e-4, measurement_std=0.001))
    for i in range(50):
        trk.update(i * DT, np.array([0.2 * i * DT]))
    for i in range(50, 60):  # occluded for half a second
        assert trk.update(i * DT, None) is False
    assert trk.position[0] == pytest.approx(0.2 * 59 * DT, abs=1e-3)
    before = trk.position.copy()
    assert trk.predict_to(59 * DT + 0.3)[0] == pytest.approx(0.2 * (59 * DT + 0.3), abs=1e-3)
    np.testing.assert_array_equal(trk.position, before)  # predict_to does not change the filter


def test_gate_rejects_an_outlier():
    trk = KalmanTracker(KalmanConfig("cv", 2, process_noise=1e-4, measurement_std=0.002, gate=16.0))
    for i in range(30):
        trk.update(i * DT, np.array([0.1 * i * DT, 0.0]))
    assert trk.update(30 * DT, np.array([5.0, 5.0])) is False
    assert trk.rejected == 1
    assert trk.position[0] == pytest.approx(0.1 * 30 * DT, abs=1e-3)


def test_first_fix_sets_position_and_reset_forgets():
    trk = KalmanTracker(KalmanConfig("ca", 2))
    assert trk.update(0.0, None) is False
    with pytest.raises(ConfigError, match="first measurement"):
        _ = trk.position
    trk.update(0.0, np.array([1.0, 2.0]))
    np.testing.assert_allclose(trk.position, [1.0, 2.0])
    trk.reset()
    assert not trk.initialized
    with pytest.raises(ConfigError, match="backwards"):
        trk.update(1.0, np.array([0.0, 0.0]))
        trk.update(0.5, np.array([0.0, 0.0]))
    with pytest.raises(ConfigError, match="model"):
        KalmanConfig("imm")


def test_a_partial_measurement_updates_only_its_axes():
    cfg = KalmanConfig(
        "cv", 2, process_noise=(1e-3, 1e-7), measurement_std=0.004, initial_velocity_std=(1.0, 0.01)
    )
    trk = KalmanTracker(cfg)
    for i in range(20):
        trk.update(i * DT, np.array([0.1 * i * DT, 0.02]))
    assert trk.velocity_std[1] < trk.velocity_std[0]  # the constrained axis is the surer one
    y_before = trk.position[1]
    # The y reading of a half-hidden target is off by 2 cm: used for x only, it cannot move y.
    assert trk.update(20 * DT, np.array([0.1 * 20 * DT, 0.04]), axes=np.array([True, False])) is True
    assert trk.position[1] == pytest.approx(y_before, abs=1e-9)
    assert trk.position[0] == pytest.approx(0.1 * 20 * DT, abs=2e-3)
    fresh = KalmanTracker(cfg)
    assert (
        fresh.update(0.0, np.array([0.0, 0.0]), axes=np.array([True, False])) is False
    )  # no partial first fix
