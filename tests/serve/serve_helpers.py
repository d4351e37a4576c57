"""Policies, in-process servers and the openpi-client runner shared by the serve tests (loopback only)."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.serve.policies import serve_policy
from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread
from hotloop.serve.spec import ArraySpec

REPO_ROOT = Path(__file__).resolve().parents[2]
OPENPI_PYTHON = REPO_ROOT / ".venv-openpi" / "bin" / "python"
ROBOT_SCRIPT = Path(__file__).with_name("openpi_robot.py")


class EchoPolicy:
    """Returns a chunk filled with the observed state: a reply that cannot be confused with another's."""

    observation_spec = {"images/top": ArraySpec((224, 224, 3), "uint8"), "state": ArraySpec((8,), "float32")}

    def reset(self) -> None:
        pass

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"actions": np.tile(obs["state"], (10, 1))}


class StateEchoPolicy(EchoPolicy):
    observation_spec = {"state": ArraySpec((8,), "float32")}


class GatedPolicy(StateEchoPolicy):
    """Blocks every inference until the test opens the gate (makes 'newest wins' deterministic)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.seen: list[float] = []

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        if self.seen:  # the warm-up inference passes freely
            self.entered.set()
            assert self.gate.wait(timeout=30), "test never opened the gate"
        self.seen.append(float(obs["state"][0]))
        return super().infer(obs)


def start(policy: Any, **config: Any) -> ServerThread:
    return ServerThread(PolicyServer(serve_policy("echo", policy), ServeConfig(port=0, **config)))


def run_robot(python: Path, scenario: str, port: int, *extra: str) -> dict[str, Any]:
    """Run one openpi-client scenario as a robot computer would: its own interpreter and venv."""
    done = subprocess.run(
        [str(python), str(ROBOT_SCRIPT), scenario, str(port), *extra],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"robot scenario {scenario} failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def healthz(port: int) -> tuple[int, str]:
    """GET /healthz on a loopback server: (status, body), a 503 included."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
