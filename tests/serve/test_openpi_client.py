"""The server against the real openpi-client 0.1.2 from its own venv (numpy < 2), as robot code uses it."""

from __future__ import annotations

from serve_helpers import EchoPolicy, StateEchoPolicy, run_robot, start


def test_round_trip_and_metadata(echo_server, openpi_python):
    out = run_robot(openpi_python, "roundtrip", echo_server.port)
    assert out["numpy"].startswith("1.")  # really the robot's numpy, not hotloop's
    meta = out["metadata"]
    assert meta["observation_spec"] == {
        "images/top": {"shape": [224, 224, 3], "dtype": "uint8", "optional": False},
        "state": {"shape": [8], "dtype": "float32", "optional": False},
    }
    assert meta["action_spec"] == {"actions": {"shape": [10, 8], "dtype": "float32", "optional": False}}
    assert out["actions"] == [[1.5] * 8] * 10 and out["actions_dtype"] == "float32"
    assert {"infer_ms", "decode_ms", "queue_ms"} <= set(out["server_timing"])


def test_malformed_observations_get_an_error_and_the_connection_survives(echo_server, openpi_python):
    out = run_robot(openpi_python, "malformed", echo_server.port)
    errors = out["errors"]
    assert "unknown key(s) 'gripper'" in errors["unknown_key"]
    assert "missing key(s) 'images/top'" in errors["missing_key"]
    assert "'state' has shape (9,)" in errors["wrong_shape"]
    assert "'images/top' has dtype float32; send uint8" in errors["wrong_dtype"]
    assert "'state' is a str" in errors["wrong_type"]
    assert "'state' holds NaN" in errors["nan"]
    assert "not a msgpack message" in errors["not_msgpack"]
    assert all(e.count("error: request") == 1 for e in errors.values()), errors
    assert out["after"] == [2.0] * 8


def test_oversized_observation(openpi_python):
    with start(StateEchoPolicy(), max_message_bytes=64 * 1024) as server:
        out = run_robot(openpi_python, "oversized", server.port)
        assert "1009" in out["over"]  # closed by the websocket layer ("message too big"), never read
        assert out["fresh"] == [1.0] * 8  # and the server keeps serving
        assert server.server.metrics.value("hotloop_requests_total", {"outcome": "ok"}) == 1


def test_auth_refused_without_the_key(openpi_python):
    with start(EchoPolicy(), api_key="s3cret") as server:
        out = run_robot(openpi_python, "auth", server.port, "s3cret")
        assert "401" in out["refused"]["none"] and "401" in out["refused"]["wrong"]
        assert out["accepted"] == [3.0] * 8
        assert server.server.metrics.value("hotloop_requests_total", {"outcome": "unauthorized"}) == 2


def test_concurrent_clients_get_their_own_replies(echo_server, openpi_python):
    out = run_robot(openpi_python, "concurrent", echo_server.port)
    assert out["mismatches"] == []
    assert out["answered"] == [25] * 8
