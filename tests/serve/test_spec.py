"""Observation checks: exact keys and shapes, casts within a kind and range, finite values, text entries,
the RTC keys, and how much of a client's value a message repeats."""

import warnings

import numpy as np
import pytest

from hotloop.realtime.rtc import rtc_observation_spec
from hotloop.serve.spec import (
    ECHO_CHARS,
    ArraySpec,
    ObservationError,
    check_observation,
    spec_of,
    zero_observation,
)

SPEC = {
    "images/top": ArraySpec((4, 4, 3), "uint8"),
    "state": ArraySpec((3,), "float32"),
    "prompt": ArraySpec((), "str"),
}


def good() -> dict:
    return {"images": {"top": np.zeros((4, 4, 3), np.uint8)}, "state": np.arange(3.0), "prompt": "pick"}


def test_accepts_and_casts_within_kind():
    out = check_observation(good(), SPEC)
    assert out["state"].dtype == np.float32 and out["state"].tolist() == [0.0, 1.0, 2.0]
    assert out["images"]["top"].dtype == np.uint8 and out["prompt"] == "pick"
    assert check_observation({**good(), "state": [1, 2, 3]}, SPEC)["state"].dtype == np.float32


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"extra": np.zeros(1)}, "unknown key"),
        ({"state": np.zeros(4)}, r"has shape \(4,\)"),
        ({"state": np.array([0.0, np.inf, 1.0])}, "NaN or infinite"),
        ({"images": {"top": np.zeros((4, 4, 3), np.int64)}}, "dtype int64; send uint8"),
        ({"images": {"top": np.zeros((4, 4, 3), np.float32)}}, "dtype float32; send uint8"),
        ({"state": [[1, 2], [3]]}, "ragged"),
        ({"state": {"nested": np.zeros(3)}}, "unknown key"),
        ({"prompt": np.zeros(3)}, "send a string"),
        ({"state": "abc"}, "'state' is a str"),
    ],
)
def test_rejects_with_the_key_named(change, match):
    with pytest.raises(ObservationError, match=match):
        check_observation({**good(), **change}, SPEC)


def test_missing_key_and_non_map():
    obs = good()
    del obs["prompt"]
    with pytest.raises(ObservationError, match="missing key"):
        check_observation(obs, SPEC)
    with pytest.raises(ObservationError, match="must be a map"):
        check_observation([1, 2], SPEC)


def test_zero_observation_passes_and_spec_of_reads_arrays():
    assert check_observation(zero_observation(SPEC), SPEC)["prompt"] == ""
    assert spec_of({"actions": np.zeros((5, 2), np.float32), "note": "x"}) == {
        "actions": ArraySpec((5, 2), "float32")
    }


def test_optional_entries_and_free_axes():
    spec = {**SPEC, "rtc_prev_actions": ArraySpec((-1, 4), "float32", optional=True)}
    assert "rtc_prev_actions" not in check_observation(good(), spec)
    for rows in (1, 7):
        out = check_observation({**good(), "rtc_prev_actions": np.zeros((rows, 4))}, spec)
        assert out["rtc_prev_actions"].shape == (rows, 4)
    with pytest.raises(ObservationError, match=r"has shape \(3, 5\)"):
        check_observation({**good(), "rtc_prev_actions": np.zeros((3, 5))}, spec)
    assert "rtc_prev_actions" not in zero_observation(spec)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        # Same-kind casts that would wrap or overflow: uint16 256 -> uint8 0, float64 1e300 -> float32 inf.
        ({"images": {"top": np.full((4, 4, 3), 256, np.uint16)}}, r"\[256, 256\], beyond the range of uint8"),
        ({"images": {"top": np.arange(48, dtype=np.uint32).reshape(4, 4, 3) * 10}}, r"\[0, 470\]"),
        ({"state": np.array([0.0, 1e300, 1.0])}, "1e\\+300, beyond the range of float32"),
        ({"state": [0, -(2**63), 1]}, None),  # int64 fits float32's range: accepted (rounded)
    ],
)
def test_values_beyond_the_spec_dtype_are_refused_without_numpy_warnings(change, match):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning (overflow in cast) fails the test
        if match is None:
            assert check_observation({**good(), **change}, SPEC)["state"][1] == np.float32(-(2**63))
            return
        with pytest.raises(ObservationError, match=match):
            check_observation({**good(), **change}, SPEC)


RTC_SPEC = {"state": ArraySpec((3,), "float32"), **rtc_observation_spec(2)}


@pytest.mark.parametrize(
    ("rtc", "match"),
    [
        ({"rtc_prev_actions": np.zeros((0, 2))}, "'rtc_prev_actions' has no rows"),
        ({"rtc_prev_actions": np.zeros((3, 2)), "rtc_delay": -1}, "'rtc_delay' is -1"),
        ({"rtc_prev_actions": np.zeros((3, 2)), "rtc_delay": np.uint64(2**63)}, "beyond the range of int64"),
        ({"rtc_prev_actions": np.zeros((3, 2)), "rtc_max_guidance_weight": -5.0}, "is -5; send a guidance"),
        (
            {"rtc_prev_actions": np.zeros((3, 2)), "rtc_mode": "fast"},
            "'rtc_mode' is 'fast'; send one of guided",
        ),
        ({"rtc_prev_actions": np.zeros((3, 3))}, r"has shape \(3, 3\)"),
    ],
)
def test_rtc_keys_are_checked_as_the_samplers_take_them(rtc, match):
    with pytest.raises(ObservationError, match=match):
        check_observation({"state": np.zeros(3), **rtc}, RTC_SPEC)


def test_rtc_keys_the_samplers_take_pass():
    rtc = {"rtc_prev_actions": np.zeros((1, 2)), "rtc_delay": 0, "rtc_max_guidance_weight": 0.0}
    for mode in ("guided", "prefix", "soft-prefix"):
        out = check_observation({"state": np.zeros(3), **rtc, "rtc_mode": mode}, RTC_SPEC)
        assert out["rtc_mode"] == mode and out["rtc_delay"].dtype == np.int64


def test_a_clients_values_are_echoed_clipped():
    huge = "k" * 1_000_000
    cases = [
        ({**good(), huge: np.zeros(1)}, "unknown key"),
        ({**good(), **{f"extra{i}": 0 for i in range(10_000)}}, "and 9995 more"),
        ({"state": np.zeros(3), "rtc_prev_actions": np.zeros((1, 2)), "rtc_mode": huge}, "'rtc_mode' is"),
    ]
    for obs, needle in cases:
        with pytest.raises(ObservationError, match=needle) as err:
            check_observation(obs, RTC_SPEC if "rtc_mode" in obs else SPEC)
        assert len(str(err.value)) < 3 * ECHO_CHARS + 200, len(str(err.value))
