"""Observation checks: exact keys and shapes, casts within a kind, finite values, text entries."""

import numpy as np
import pytest

from hotloop.serve.spec import ArraySpec, ObservationError, check_observation, spec_of, zero_observation

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
