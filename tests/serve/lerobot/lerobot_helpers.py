"""Shared by the `--protocol lerobot` tests: LeRobot's venv, the stock-client runner, servers on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hotloop.serve.lerobot.execution import ExecutionConfig
from hotloop.serve.lerobot.instructions import served_target
from hotloop.serve.lerobot.server import LeRobotServer
from hotloop.serve.lerobot.servicer import LeRobotServeConfig
from hotloop.serve.policies import load_served_policy
from hotloop.serve.server import ServedPolicy

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
LEROBOT_PYTHON = REPO_ROOT / ".venv-lerobot" / "bin" / "python"
FPS = 50  # the stand-in robot's control rate: the client's --fps and the server's


def lerobot_env(home: Path) -> dict[str, str]:
    """The LeRobot side's environment: offline, its calibration and log folders under `home`, one intra-op
    thread (LeRobot's policy_server runs a ResNet-18 ACT: two OpenMP threads beside the test's own servers
    on a 2-core box spin at their barriers)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        HF_HUB_OFFLINE="1", HF_LEROBOT_HOME=str(home / "hf"), PYTHONPATH=str(HERE), OMP_NUM_THREADS="1"
    )
    return env


def client_args(
    address: str,
    target: str,
    *,
    policy_type: str,
    actions_per_chunk: int,
    state_dim: int = 10,
    action_dim: int = 4,
    views: str = "top:96x128,wrist:64x64",
    fps: int = FPS,
    threshold: float = 0.5,
    aggregate: str = "latest_only",
    task: str = "pick up the box",
) -> list[str]:
    """The flags of `python -m lerobot.async_inference.robot_client`, as a user passes them."""
    return [
        "--robot.type=hotloop_standin",
        f"--robot.state_dim={state_dim}",
        f"--robot.action_dim={action_dim}",
        f"--robot.views={views}",
        f"--server_address={address}",
        f"--policy_type={policy_type}",
        f"--pretrained_name_or_path={target}",
        f"--actions_per_chunk={actions_per_chunk}",
        f"--fps={fps}",
        f"--chunk_size_threshold={threshold}",
        f"--aggregate_fn_name={aggregate}",
        f"--task={task}",
    ]


def run_clients(runs: list[dict[str, Any]], workdir: Path, timeout_s: float = 300.0) -> list[dict[str, Any]]:
    """Run LeRobot's stock RobotClient once per entry (`{"args", "observations"}`), in LeRobot's venv."""
    out = workdir / f"client-{time.monotonic_ns()}.json"
    spec = json.dumps({"out": str(out), "runs": runs})
    done = subprocess.run(
        [str(LEROBOT_PYTHON), str(HERE / "lerobot_robot_run.py"), spec],
        cwd=workdir,
        env=lerobot_env(workdir),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0 and out.is_file(), f"the LeRobot client failed:\n{done.stderr[-4000:]}"
    return json.loads(out.read_text())["runs"]  # type: ignore[no-any-return]


def make_act_checkpoint(
    folder: Path, *, chunk: int = 20, state: int = 6, camera: str = "front:96x128"
) -> Path:
    """A stock LeRobot 0.4.4 ACT checkpoint written by LeRobot's own code (`make_lerobot_checkpoint.py`)."""
    done = subprocess.run(
        [str(LEROBOT_PYTHON), str(HERE / "make_lerobot_checkpoint.py"), str(folder), "--chunk", str(chunk),
         "--state", str(state), "--camera", camera],
        env=lerobot_env(folder.parent),
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def lerobot_policy_server(workdir: Path, fps: int = FPS) -> Iterator[str]:
    """LeRobot's own `policy_server` in its venv on a free loopback port; yields its address."""
    port = free_port()
    proc = subprocess.Popen(
        [str(LEROBOT_PYTHON), "-m", "lerobot.async_inference.policy_server", "--host=127.0.0.1",
         f"--port={port}", f"--fps={fps}", "--inference_latency=0", "--obs_queue_timeout=2"],
        cwd=workdir,
        env=lerobot_env(workdir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert proc.poll() is None, "LeRobot's policy_server exited"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def hotloop_server(target: str, served: ServedPolicy | None = None, **execution: Any) -> LeRobotServer:
    """`hotloop serve TARGET --protocol lerobot` for this process, on a free loopback port (run it, with
    any others, in one `LeRobotServerThread`)."""
    from hotloop.targets import TargetOptions

    served = served or load_served_policy(target, TargetOptions())
    config = LeRobotServeConfig(port=0, execution=ExecutionConfig(**{"fps": FPS, **execution}))
    return LeRobotServer(served_target(target, served), config)


def executed_came_from_chunks(run: dict[str, Any]) -> list[str]:
    """Problems with a run's execution (empty: none). Every executed action is a row a hotloop chunk held
    for that timestep, the row of the last chunk the client kept for it (the client runs latest_only);
    the timesteps run on one by one: none is lost, and one repeats only where the stock client's own race
    (a merge between its pop of an action and its update of latest_action, recorded as `raced`) queued it
    again."""
    problems = []
    kept: dict[int, list[float]] = {}
    rows: dict[int, list[list[float]]] = {}
    raced_steps: set[int] = set()
    for chunk in run["received"]:
        for t, action in zip(chunk["timesteps"], chunk["actions"], strict=True):
            rows.setdefault(t, []).append(action)
            if t > chunk["latest_at_arrival"]:
                kept[t] = action
            if chunk["raced"] and t <= chunk["latest_at_arrival"] + 2:
                raced_steps.add(t)  # the one or two the control loop was executing meanwhile
    steps = [t for t, _ in run["executed"]]
    for before, after in zip(steps, steps[1:], strict=False):
        if after == before and after in raced_steps:
            continue  # the client's race, not the server's
        if after != before + 1:
            problems.append(f"executed timestep {after} after {before}: {steps[:60]}")
            break
    for t, action in run["executed"]:
        if not any(np.array_equal(action, row) for row in rows.get(t, [])):
            problems.append(f"timestep {t}: executed {action}, which no chunk held ({rows.get(t)})")
            break
        if t not in raced_steps and kept.get(t) != action:
            problems.append(f"timestep {t}: executed {action}, the last kept row was {kept.get(t)}")
            break
    return problems


class RawClient:
    """A bare gRPC client of `transport.AsyncInference` (bytes in, bytes out) for what no stock client
    sends: malicious pickles, oversized or malformed payloads, missing keys."""

    def __init__(self, address: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        import grpc

        # Its own connection: channels of one process to one address otherwise share one (one peer).
        self.channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        self.metadata = metadata

    def close(self) -> None:
        self.channel.close()

    def call(self, method: str, payload: bytes | list[bytes]) -> tuple[str, str, bytes]:
        """(status code name, details, reply bytes) of one call."""
        import grpc

        path = f"/transport.AsyncInference/{method}"
        try:
            if isinstance(payload, list):
                reply = self.channel.stream_unary(path)(iter(payload), metadata=self.metadata, timeout=60)
            else:
                reply = self.channel.unary_unary(path)(payload, metadata=self.metadata, timeout=60)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details() or "", b""
        return "OK", "", reply

    def observation(self, payload: bytes) -> tuple[str, str, bytes]:
        from hotloop.serve.lerobot import wire

        return self.call("SendObservations", [wire.encode_chunk(c) for c in wire.split_payload(payload)])
