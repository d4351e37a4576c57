"""The wire format: openpi's msgpack-numpy layout, with corrupt input as one clear WireError."""

import msgpack
import numpy as np
import pytest

from hotloop.client import codec


def test_round_trip_keeps_dtype_shape_and_values():
    obs = {
        "images": {"top": np.arange(12, dtype=np.uint8).reshape(2, 2, 3)},
        "state": np.float32(1.5),
        "n": 3,
    }
    back = codec.unpackb(codec.packb(obs))
    assert (
        back["images"]["top"].dtype == np.uint8
        and back["images"]["top"].tolist() == obs["images"]["top"].tolist()
    )
    assert back["state"] == np.float32(1.5) and back["n"] == 3


def test_layout_is_openpis():
    packed = msgpack.unpackb(codec.packb(np.zeros((2, 3), np.float32)))
    assert packed == {b"__ndarray__": True, b"data": bytes(24), b"dtype": "<f4", b"shape": [2, 3]}


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (b"\xc1", "not a msgpack message"),
        (
            msgpack.packb({b"__ndarray__": True, b"data": b"123", b"dtype": "<f4", b"shape": [2]}),
            "needs 8 bytes",
        ),
        (
            msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "|O", b"shape": [0]}),
            "may not travel",
        ),
        (
            msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "nope", b"shape": [0]}),
            "unknown dtype",
        ),
        (
            msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "<f4", b"shape": [-1]}),
            "non-negative",
        ),
    ],
)
def test_corrupt_messages_raise_wire_error(message, match):
    with pytest.raises(codec.WireError, match=match):
        codec.unpackb(message)


def test_object_arrays_are_refused_on_send():
    with pytest.raises(codec.WireError, match="cannot be sent"):
        codec.packb({"x": np.array([object()])})
