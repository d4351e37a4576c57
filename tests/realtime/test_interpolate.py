import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.realtime.interpolate import ChunkInterpolator, InterpolationConfig


def _finite_differences(start_p, start_v, commands, dt):
    p = np.concatenate([start_p[None], commands])
    v = np.diff(p, axis=0) / dt
    a = np.diff(np.concatenate([start_v[None], v]), axis=0) / dt
    return v, a


@pytest.mark.parametrize("method", ["linear", "cubic"])
@pytest.mark.parametrize("control_hz", [100.0, 500.0, 1000.0])
def test_limits_are_never_exceeded_across_chunks(method, control_hz):
    vmax, amax = np.array([0.5, 0.5, 0.3]), np.array([4.0, 4.0, 2.0])
    cfg = InterpolationConfig(10.0, control_hz, method, tuple(vmax), tuple(amax))
    interp = ChunkInterpolator(cfg)
    interp.reset(np.zeros(3))
    rng = np.random.default_rng(int(control_hz))
    p, v = interp.position, interp.velocity
    for _ in range(6):  # random chunks that jump far beyond what the limits allow
        chunk = rng.uniform(-0.3, 0.3, (8, 3))
        out = interp.commands(chunk)
        assert out.shape == (8 * cfg.ratio, 3)
        vel, acc = _finite_differences(p, v, out, cfg.dt)
        assert np.all(np.abs(vel) <= vmax + 1e-9)
        assert np.all(np.abs(acc) <= amax + 1e-6)
        p, v = interp.position, interp.velocity
    assert interp.limited_steps > 0  # the test did exercise the limits


@pytest.mark.parametrize("method", ["linear", "cubic"])
def test_feasible_chunk_is_followed_exactly_and_reaches_its_endpoint(method):
    cfg = InterpolationConfig(10.0, 500.0, method, max_velocity=1.0, max_acceleration=100.0)
    interp = ChunkInterpolator(cfg)
    start = np.array([0.1, -0.05])
    interp.reset(start)
    chunk = start + np.cumsum(np.full((6, 2), 0.01), axis=0)  # 0.1 m/s steps: well inside the limits
    ref = interp.reference(chunk)
    out = interp.commands(chunk)
    np.testing.assert_allclose(out, ref, atol=1e-12)
    np.testing.assert_allclose(out[-1], chunk[-1], atol=1e-12)
    # Every action is reached at the end of its period (the knots).
    np.testing.assert_allclose(out[cfg.ratio - 1 :: cfg.ratio], chunk, atol=1e-12)
    assert interp.limited_steps == 0


def test_infeasible_endpoint_is_reached_once_the_limits_allow():
    vmax, amax = 0.2, 1.0
    cfg = InterpolationConfig(10.0, 200.0, "linear", vmax, amax)
    interp = ChunkInterpolator(cfg)
    interp.reset(np.zeros(1))
    out = interp.commands(np.array([[0.5]]))  # 0.5 m in 0.1 s: 25x too fast
    assert out[-1, 0] < 0.5
    tail = interp.hold(600)
    np.testing.assert_allclose(tail[-1], [0.5], atol=1e-12)
    np.testing.assert_allclose(interp.velocity, [0.0], atol=1e-12)  # it stopped there, no overshoot
    everything = np.concatenate([out, tail])[:, 0]
    assert everything.max() <= 0.5 + 1e-12
    # Time-optimal bound: accelerate to vmax (0.2 s), cruise, brake (0.2 s): 2.7 s for 0.5 m; allow a step.
    first = np.argmax(np.abs(everything - 0.5) < 1e-9)
    assert (first + 1) * cfg.dt <= 2.7 + 2 * cfg.dt


def test_cubic_passes_through_the_knots_with_continuous_velocity():
    cfg = InterpolationConfig(10.0, 1000.0, "cubic")
    interp = ChunkInterpolator(cfg)
    interp.reset(np.zeros(1), velocity=np.array([0.2]))
    chunk = np.array([[0.03], [0.0], [0.05], [0.05]])
    ref = interp.reference(chunk)
    np.testing.assert_allclose(ref[cfg.ratio - 1 :: cfg.ratio], chunk, atol=1e-12)
    vel = np.diff(np.concatenate([[[0.0]], ref]), axis=0)[:, 0] / cfg.dt
    assert vel[0] == pytest.approx(0.2, abs=0.01)  # continues at the running velocity
    linear = ChunkInterpolator(InterpolationConfig(10.0, 1000.0, "linear"))
    linear.reset(np.zeros(1))
    lin_vel = np.diff(np.concatenate([[[0.0]], linear.reference(chunk)]), axis=0)[:, 0] / cfg.dt
    assert np.abs(np.diff(vel)).max() < 0.1 * np.abs(np.diff(lin_vel)).max()  # no velocity kinks


def test_bad_settings_name_the_field():
    with pytest.raises(ConfigError, match="control_hz"):
        InterpolationConfig(10.0, 50.0)
    with pytest.raises(ConfigError, match="whole number"):
        InterpolationConfig(30.0, 500.0)
    with pytest.raises(ConfigError, match="max_velocity"):
        InterpolationConfig(max_velocity=0.0)
    with pytest.raises(ConfigError, match="method"):
        InterpolationConfig(method="quintic")
    interp = ChunkInterpolator(InterpolationConfig())
    with pytest.raises(ConfigError, match="reset"):
        interp.commands(np.zeros((2, 3)))
    interp.reset(np.zeros(3))
    with pytest.raises(ConfigError, match="shape"):
        interp.commands(np.zeros((2, 4)))
