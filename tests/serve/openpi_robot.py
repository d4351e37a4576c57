"""Robot-side scenarios run by the serve tests inside `.venv-openpi` (real openpi-client 0.1.2, numpy < 2).

This file imports only openpi-client and what it brings: it is robot code written for openpi, unchanged.
Usage: python openpi_robot.py SCENARIO PORT [API_KEY]; prints one JSON object on stdout.
"""

import json
import sys
import threading

import numpy as np
from openpi_client import websocket_client_policy


def observation(value: float, image_size: int = 224) -> dict:
    return {
        "images": {"top": np.full((image_size, image_size, 3), 7, dtype=np.uint8)},
        "state": np.full(8, value, dtype=np.float64),  # robot code often sends float64
    }


def client(port: int, api_key: str | None = None) -> websocket_client_policy.WebsocketClientPolicy:
    return websocket_client_policy.WebsocketClientPolicy(host="127.0.0.1", port=port, api_key=api_key)


def error_of(policy, obs) -> str:
    try:
        policy.infer(obs)
    except RuntimeError as exc:  # openpi-client raises the server's text reply as RuntimeError
        return str(exc)
    return ""


def roundtrip(port: int) -> dict:
    policy = client(port)
    reply = policy.infer(observation(1.5))
    return {
        "metadata": policy.get_server_metadata(),
        "actions": reply["actions"].tolist(),
        "actions_dtype": str(reply["actions"].dtype),
        "server_timing": sorted(reply["server_timing"]),
        "numpy": np.__version__,
    }


def malformed(port: int) -> dict:
    policy = client(port)
    good = observation(2.0)
    nan = observation(2.0)
    nan["state"][3] = np.nan
    errors = {
        "unknown_key": error_of(policy, {**good, "gripper": np.zeros(1)}),
        "missing_key": error_of(policy, {"state": good["state"]}),
        "wrong_shape": error_of(policy, {**good, "state": np.zeros(9)}),
        "wrong_dtype": error_of(policy, {**good, "images": {"top": np.zeros((224, 224, 3), np.float32)}}),
        "wrong_type": error_of(policy, {**good, "state": "not an array"}),
        "nan": error_of(policy, nan),
    }
    # Bytes that are not msgpack at all, through the client's own socket.
    policy._ws.send(b"\xc1\xc1 definitely not msgpack")
    errors["not_msgpack"] = policy._ws.recv()
    after = policy.infer(good)  # the same connection still serves
    return {"errors": errors, "after": after["actions"][0].tolist()}


def oversized(port: int) -> dict:
    policy = client(port)
    limit = policy.get_server_metadata()["max_message_bytes"]
    small = {"state": np.ones(8)}
    try:  # over the limit: the websocket layer refuses it from its header and closes this connection
        policy.infer({**small, "blob": np.zeros(limit + 1024, np.uint8)})
        over = "no error"
    except Exception as exc:
        over = f"{type(exc).__name__}: {exc}"
    fresh = client(port).infer(small)["actions"][0].tolist()  # the server still serves
    return {"over": over, "fresh": fresh}


def auth(port: int, key: str) -> dict:
    refused = {}
    for name, given in (("none", None), ("wrong", key + "x")):
        try:
            client(port, given)
            refused[name] = "connected"
        except Exception as exc:
            refused[name] = f"{type(exc).__name__}: {exc}"
    reply = client(port, key).infer(observation(3.0))
    return {"refused": refused, "accepted": reply["actions"][0].tolist()}


def concurrent(port: int, clients: int = 8, requests: int = 25) -> dict:
    mismatches: list[str] = []
    answered = [0] * clients

    def run(index: int) -> None:
        policy = client(port)
        for i in range(requests):
            value = index * 1000 + i
            got = policy.infer(observation(float(value)))["actions"]
            if not np.all(got == value):
                mismatches.append(f"client {index} request {i}: sent {value}, got {got[0, 0]}")
            answered[index] += 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return {"answered": answered, "mismatches": mismatches}


def served_in(port: int) -> dict:
    """A robot connecting now: seconds until its first chunk arrived (connect included), then 5 more."""
    import time

    t0 = time.monotonic()
    policy = client(port)
    first = policy.infer(observation(4.0))["actions"]
    seconds = time.monotonic() - t0
    more = [float(policy.infer(observation(float(i)))["actions"][0, 0]) for i in range(5)]
    return {"seconds": seconds, "first": float(first[0, 0]), "more": more}


def spec_zeros(port: int) -> dict:
    """Build an observation from the server's advertised spec (flat keys) and run it."""
    policy = client(port)
    meta = policy.get_server_metadata()
    obs = {k: np.zeros(s["shape"], dtype=s["dtype"]) for k, s in meta["observation_spec"].items()}
    reply = policy.infer(obs)
    return {
        "metadata": meta,
        "shape": list(reply["actions"].shape),
        "finite": bool(np.isfinite(reply["actions"]).all()),
    }


if __name__ == "__main__":
    scenario, port = sys.argv[1], int(sys.argv[2])
    if scenario == "auth":
        result = auth(port, sys.argv[3])
    else:
        result = {
            "roundtrip": roundtrip,
            "malformed": malformed,
            "oversized": oversized,
            "concurrent": concurrent,
            "spec_zeros": spec_zeros,
            "served_in": served_in,
        }[scenario](port)
    print(json.dumps(result))
