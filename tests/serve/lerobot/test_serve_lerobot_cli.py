"""`hotloop serve TARGET --protocol lerobot` as an operator runs it, and its bad-input errors (one line
naming the flag, exit code 2, before any policy is loaded where the flags alone decide)."""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import subprocess
import sys
import time
import urllib.request

import fake_lerobot
import numpy as np
import pytest
from lerobot_helpers import REPO_ROOT, RawClient, free_port
from typer.testing import CliRunner

from hotloop.cli import app
from hotloop.serve.lerobot import wire

runner = CliRunner()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--protocol", "grpc"], "--protocol 'grpc' is not known; use openpi or lerobot"),
        (["--protocol", "lerobot", "--strategy", "async"], "--strategy 'async' with --protocol lerobot"),
        (["--protocol", "lerobot", "--skip-similar", "-1"], "--skip-similar must be a positive"),
        (["--protocol", "lerobot", "--fps", "0"], "--fps must be in (0, 1000]"),
        (["--protocol", "lerobot", "--stall-limit-ms", "50"], "--stall-limit-ms sets /healthz"),
        (
            ["--protocol", "lerobot", "--port", "9000", "--metrics-port", "9000"],
            "--metrics-port 9000 is the gRPC --port",
        ),
        (["--strategy", "rtc-soft"], "are for --protocol lerobot"),
        (
            ["--protocol", "lerobot", "--strategy", "rtc-soft"],
            "--strategy rtc-soft: toy:mlp has no real-time chunking",
        ),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args, message):
    result = runner.invoke(app, ["serve", "toy:mlp", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


# A server process that imports torch: ~2 CPU-s, kept in `make test` (the command line's only end-to-end check).
def test_serve_protocol_lerobot_from_the_command_line(monkeypatch, tmp_path):
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    command = [sys.executable, "-m", "hotloop", "serve", "toy:mlp", "--protocol", "lerobot", "--port", str(port),
               "--metrics-port", str(metrics_port)]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lr = fake_lerobot.install(monkeypatch)
    features = {
        "observation.state": {"dtype": "float32", "shape": (32,), "names": [f"m{i}.pos" for i in range(32)]}
    }
    try:
        # The port first: a gRPC channel that found nothing listening waits out its reconnect backoff
        # (~10 s of a 2 s start-up here).
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not come up"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.2)
        client = RawClient(f"127.0.0.1:{port}")
        while client.call("Ready", b"")[0] != "OK":
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.3)
        setup = lr.RemotePolicyConfig("hotloop", "toy:mlp", features, 50)
        assert (
            client.call("SendPolicyInstructions", wire.encode_bytes_message(pickle.dumps(setup)))[0] == "OK"
        )
        obs = lr.TimedObservation(
            timestamp=time.time(),
            timestep=0,
            observation={f"m{i}.pos": 0.1 * i for i in range(32)},
            must_go=True,
        )
        assert client.observation(pickle.dumps(obs))[0] == "OK"
        code, _, reply = client.call("GetActions", b"")
        actions = pickle.loads(wire.decode_bytes_message(reply))
        assert code == "OK" and len(actions) == 50 and np.isfinite(actions[0].get_action().numpy()).all()
        metrics = (
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        )
        assert 'hotloop_lerobot_observations_total{outcome="inferred"} 1.0' in metrics
        assert 'hotloop_rpc_total{code="OK",rpc="GetActions"} 1.0' in metrics
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
