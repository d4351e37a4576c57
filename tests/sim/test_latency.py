"""The latency-spec and replay-file parsers: every input is accepted as a usable model or rejected with
a one-line ConfigError naming it; never a traceback (property-based, plus the cases users hit)."""

import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hotloop.closedloop.latency import LatencyModel, load_bench_latency, parse_latency
from hotloop.errors import ConfigError

# JSON documents of any shape, with the values a broken or hostile file holds: NaN, huge, negative,
# booleans, strings, nulls, nesting.
_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
_quantile_keys = ("min", "p50", "p90", "p95", "p99", "max", "mean")
_bench_like = st.fixed_dictionaries(
    {},
    optional={
        "samples_ms": _json | st.lists(_json_leaf, max_size=6),
        "latency_ms": _json | st.dictionaries(st.sampled_from(_quantile_keys), _json_leaf, max_size=7),
    },
)


def _usable(model: LatencyModel) -> None:
    """An accepted model only ever draws finite, non-negative milliseconds."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        ms = model.sample_ms(3.0, rng)
        assert math.isfinite(ms) and ms >= 0
    assert json.dumps(model.describe(), allow_nan=False)  # the report stays valid JSON


def _one_line(error: ConfigError) -> str:
    text = str(error)
    assert text and "\n" not in text and "\r" not in text, text
    return text


@given(st.text(max_size=40))
@settings(max_examples=150, deadline=None)
def test_any_spec_is_a_model_or_a_one_line_error(spec):
    try:
        model = parse_latency(spec)
    except ConfigError as e:
        _one_line(e)
    else:
        _usable(model)


@given(st.floats(allow_nan=True, allow_infinity=True))
@settings(max_examples=200, deadline=None)
def test_fixed_accepts_exactly_the_finite_non_negative_numbers(ms):
    spec = f"fixed:{ms!r}"
    if math.isfinite(ms) and ms >= 0:
        assert parse_latency(spec).fixed_ms == ms
    else:
        with pytest.raises(ConfigError, match="finite and >= 0"):
            parse_latency(spec)


@given(_json | _bench_like)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_json_replay_file_is_a_model_or_a_one_line_error(tmp_path, doc):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity written as JSON's extensions, as Python does
    try:
        model = load_bench_latency(path)
    except ConfigError as e:
        assert "bench.json" in _one_line(e)
    else:
        _usable(model)


@given(st.binary(max_size=64))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_bytes_replay_file_is_a_model_or_a_one_line_error(tmp_path, data):
    path = tmp_path / "bench.json"
    path.write_bytes(data)
    try:
        model = load_bench_latency(path)
    except ConfigError as e:
        _one_line(e)
    else:
        _usable(model)


def _bench(**latency):
    base = {"min": 1.0, "p50": 2.0, "p90": 3.0, "p95": 4.0, "p99": 5.0, "max": 6.0}
    return {"latency_ms": {**base, **latency}}


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"samples_ms": [1.0, -2.0]}, "samples_ms must be"),
        ({"samples_ms": [1.0, True]}, "samples_ms must be"),
        ({"samples_ms": [1.0, "3"]}, "samples_ms must be"),
        ({"samples_ms": [1.0, None]}, "samples_ms must be"),
        ({"samples_ms": [[1.0, 2.0]]}, "samples_ms must be"),
        ({"samples_ms": "1,2"}, "samples_ms must be"),
        ({"samples_ms": [float("nan")]}, "samples_ms must be"),
        ({"samples_ms": [1e309]}, "samples_ms must be"),
        (_bench(p50=-1.0, min=-2.0), "p50"),
        (_bench(p99=True), "p99"),
        (_bench(max="6"), "max"),
        (_bench(p90=None), "p90"),
        (_bench(p95=float("nan")), "p95"),
        (_bench(max=1e309), "max"),
        (_bench(min=[1]), "min"),
        (_bench(p90=1.5), "must not decrease"),
        ({"latency_ms": [1, 2]}, "no 'latency_ms' object"),
        ([1.0, 2.0], "JSON list"),
        (None, "JSON NoneType"),
    ],
)
def test_bad_replay_values_are_named(tmp_path, doc, needle):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as e:
        load_bench_latency(path)
    assert needle in _one_line(e.value) and "bad.json" in str(e.value)


def test_replay_files_that_are_not_json_files(tmp_path):
    binary = tmp_path / "bin.json"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(ConfigError, match="not a JSON text file"):
        parse_latency(str(binary))
    folder = tmp_path / "dir.json"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        parse_latency(f"replay:{folder}")
    with pytest.raises(ConfigError, match="is not a regular file"):
        parse_latency("replay:/dev/null")
    with pytest.raises(ConfigError, match="does not exist"):
        parse_latency(f"replay:{tmp_path / 'missing.json'}")
    for spec in ("replay:", "replay:  "):
        with pytest.raises(ConfigError, match="needs a file"):
            parse_latency(spec)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError):
        parse_latency(str(deep))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file: no unreadable file to test with")
def test_unreadable_replay_file(tmp_path):
    path = tmp_path / "locked.json"
    path.write_text(json.dumps(_bench()))
    path.chmod(0)
    with pytest.raises(ConfigError, match="cannot be read"):
        parse_latency(str(path))


def test_good_replay_files_still_load(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(json.dumps({**_bench(), "samples_ms": []}))  # empty samples: the quantiles are used
    model = parse_latency(f"replay:{path}")
    assert model.quantiles[0] == (0.0, 1.0) and model.quantiles[-1] == (1.0, 6.0)
    path.write_text(json.dumps({"samples_ms": [0, 2.5, 7]}))  # integers are milliseconds too
    assert parse_latency(str(path)).samples_ms == (0.0, 2.5, 7.0)
