import json

import numpy as np
import pytest

from hotloop.closedloop.latency import parse_latency
from hotloop.closedloop.metrics import rms_jerk, wilson_interval
from hotloop.errors import ConfigError


def test_fixed_and_measured():
    rng = np.random.default_rng(0)
    assert parse_latency("fixed:120").sample_ms(5.0, rng) == 120.0
    assert parse_latency("measured").sample_ms(5.0, rng) == 5.0
    for bad in ("fixed:abc", "fixed:-1", "slow"):
        with pytest.raises(ConfigError):
            parse_latency(bad)


def test_replay_prefers_samples(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(
        json.dumps(
            {
                "target": "x",
                "latency_ms": {"p50": 1, "p90": 2, "p95": 3, "p99": 4, "max": 5},
                "samples_ms": [10.0, 20.0, 30.0],
            }
        )
    )
    model = parse_latency(str(path))
    draws = {model.sample_ms(0.0, np.random.default_rng(i)) for i in range(50)}
    assert draws == {10.0, 20.0, 30.0}


def test_replay_from_quantiles(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"latency_ms": {"p50": 40, "p90": 60, "p95": 70, "p99": 90, "max": 150}}))
    model = parse_latency(f"replay:{path}")
    rng = np.random.default_rng(0)
    draws = np.array([model.sample_ms(0.0, rng) for _ in range(4000)])
    assert draws.min() >= 40 and draws.max() <= 150
    assert np.median(draws) == pytest.approx(40, abs=1)  # lower half sits at p50 when min is absent
    assert np.quantile(draws, 0.9) == pytest.approx(60, abs=2)
    assert np.quantile(draws, 0.99) == pytest.approx(90, abs=8)


def test_replay_file_without_bench_schema(tmp_path):
    path = tmp_path / "nope.json"
    path.write_text(json.dumps({"target": "x"}))
    with pytest.raises(ConfigError, match=r"nope\.json.*latency_ms"):
        parse_latency(str(path))
    with pytest.raises(ConfigError, match="does not exist"):
        parse_latency(str(tmp_path / "missing.json"))
    path.write_text(json.dumps({"latency_ms": {"p50": 1}}))
    with pytest.raises(ConfigError, match="lacks p90"):
        parse_latency(str(path))


def test_wilson_interval():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-3)
    lo, hi = wilson_interval(45, 50)
    assert lo == pytest.approx(0.7864, abs=1e-3) and hi == pytest.approx(0.9565, abs=1e-3)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)
    # The interval always holds the observed rate, also at 0/n and n/n where rounding bites (30/30 once
    # gave an upper end just below 1, and the sweep plot's error bar went negative).
    for n in range(1, 201):
        for s in range(n + 1):
            lo, hi = wilson_interval(s, n)
            assert 0.0 <= lo <= s / n <= hi <= 1.0, (s, n)


def test_jerk():
    t = np.arange(20)[:, None] * 0.01
    assert rms_jerk(np.hstack([t * t, t, 0 * t]), 0.01) == pytest.approx(0.0, abs=1e-6)
    assert rms_jerk(np.hstack([t**3, 0 * t, 0 * t]), 0.01) == pytest.approx(6.0, rel=1e-6)
