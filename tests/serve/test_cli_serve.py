"""`hotloop serve` as an operator runs it, and its bad-input errors (one line, exit code 2)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from serve_helpers import run_robot
from typer.testing import CliRunner

from hotloop.cli import app

runner = CliRunner()
SRC = Path(__file__).resolve().parents[2] / "src"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow  # a server process that imports torch
def test_serve_toy_to_the_openpi_client(openpi_python):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hotloop", "serve", "toy:mlp", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Ctrl-C as a terminal's foreground process gets it: a suite started as a background job of a
        # script inherits SIGINT ignored (POSIX), Python then installs no handler, and the server never
        # stopped (found when CI was started that way).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "server did not come up"
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        out = run_robot(openpi_python, "spec_zeros", port)
        assert out["metadata"]["observation_spec"] == {
            "state": {"shape": [32], "dtype": "float32", "optional": False}
        }
        assert out["metadata"]["action_spec"] == {
            "actions": {"shape": [50, 14], "dtype": "float32", "optional": False}
        }
        assert out["shape"] == [50, 14] and out["finite"]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'hotloop_requests_total{outcome="ok"} 1.0' in metrics
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "serving toy:mlp on ws://127.0.0.1" in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["toy:mlp", "--port", "70000"], "--port 70000 is out of range"),
        (["toy:mlp", "--max-message-mb", "0"], "--max-message-mb must be > 0"),
        (
            ["toy:mlp", "--api-key-file", "/nonexistent/key"],
            "--api-key-file /nonexistent/key: cannot read it",
        ),
        (["toy:mlpp"], "Did you mean"),
        (["."], "neither a compiled artifact"),
        (
            ["toy:mlp", "--max-message-mb", "nan"],
            "--max-message-mb must be > 0 and at most 1024 MiB (got nan)",
        ),
        (
            ["toy:mlp", "--max-message-mb", "inf"],
            "--max-message-mb must be > 0 and at most 1024 MiB (got inf)",
        ),
        (["toy:mlp", "--max-message-mb", "1e300"], "at most 1024 MiB (got 1e+300)"),
        (["toy:mlp", "--max-connections", "0"], "--max-connections must be >= 1"),
        (["toy:mlp", "--host", ""], "--host is empty, which would listen on every interface"),
        (
            ["expert:scripted"],
            "the scripted expert reads the simulator's own state, which a robot does not send",
        ),
    ],
)
def test_bad_input_is_one_line(args, message):
    result = runner.invoke(app, ["serve", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_port_in_use(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = runner.invoke(app, ["serve", "toy:mlp", "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert f"cannot listen on 127.0.0.1:{port}" in result.output and "pick another --port" in result.output


def test_api_key_file_that_is_not_text(tmp_path):
    key = tmp_path / "key"
    key.write_bytes(b"\xff\xfe\x00 not utf-8")
    result = runner.invoke(app, ["serve", "toy:mlp", "--api-key-file", str(key)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: --api-key-file {key} is not UTF-8 text; put the token in it " + (
        "as plain text (e.g. from `openssl rand -hex 32`)"
    )
