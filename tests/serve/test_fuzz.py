"""Random bytes and random msgpack structures: each gets exactly one reply, the connection stays open."""

from __future__ import annotations

import msgpack
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_helpers import StateEchoPolicy, start
from websockets.sync.client import connect

from hotloop.client import codec

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=16),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
fake_arrays = st.fixed_dictionaries(
    {
        b"__ndarray__": st.just(True),
        b"data": st.binary(max_size=64),
        b"dtype": st.sampled_from(["<f4", "<f8", "|u1", "|O", "<c8", "zz", "<U3", "|V4"]),
        b"shape": st.lists(st.integers(-2, 9), max_size=3),
    }
)
messages = st.one_of(
    st.binary(max_size=64),
    values.map(msgpack.packb),
    st.dictionaries(st.sampled_from(["state", "other"]), fake_arrays | values, max_size=2).map(msgpack.packb),
)


def test_every_message_gets_one_reply_and_the_connection_stays():
    with start(StateEchoPolicy()) as server, connect(server.url, max_size=None) as ws:
        ws.recv(timeout=10)
        sent = 0

        @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
        @given(messages)
        def one(message: bytes) -> None:
            nonlocal sent
            ws.send(message)
            reply = ws.recv(timeout=10)
            if isinstance(reply, str):
                assert reply.startswith(f"error: request {sent}: "), reply
            else:  # it happened to be a valid observation
                assert codec.unpackb(reply)["request_id"] == sent
            sent += 1

        one()
        ws.send(codec.packb({"state": np.full(8, 3.0)}))
        assert np.all(codec.unpackb(ws.recv(timeout=10))["actions"] == 3.0)
