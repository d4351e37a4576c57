"""LeRobot's own `policy_server` against `hotloop serve ART --protocol lerobot`, side by side (issue 34).

One ACT checkpoint that LeRobot 0.4.4 loads (default: made here with LeRobot's own code, untrained
ResNet-18 + a small transformer, `tests/serve/lerobot/make_lerobot_checkpoint.py`), compiled by
`hotloop compile` (or `--artifact`). Both servers run in their own processes on loopback; one client
(LeRobot's own stubs and classes, `lerobot_async_ab_client.py`, in .venv-lerobot) sends the same
observations (a `--camera` frame the servers resize to the checkpoint's, and the joint state) to each in
turn, the order alternating, and times each round trip (pickle, SendObservations, GetActions, unpickle).

Server time per chunk, as each server logs it:
- LeRobot: its deserialization time (`Deserialization time`, debug log file) + its `Total time`
  (prepare, preprocess, inference, per-action postprocess, pickle);
- hotloop: its `chunk #N: ... ms of server work` debug line (unpickle, map, resize, check, inference,
  reply encoding); the wait for the model is excluded on both.

    PYTHONPATH=src python benchmarks/lerobot_async_ab.py --compile-args=--force --requests 200 --json ab.json
    PYTHONPATH=src python benchmarks/lerobot_async_ab.py --checkpoint CKPT --artifact ART --requests 500

Report `uptime`'s load with the figures: they mean nothing on a busy machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
LEROBOT_PYTHON = REPO / ".venv-lerobot" / "bin" / "python"
MAKE_CHECKPOINT = REPO / "tests" / "serve" / "lerobot" / "make_lerobot_checkpoint.py"
HOTLOOP_SERVER = """
import logging, sys
logging.basicConfig(level=logging.INFO, filename=sys.argv.pop(1), format="%(asctime)s %(name)s %(message)s")
logging.getLogger("hotloop.serve.lerobot").setLevel(logging.DEBUG)
from hotloop.cli import main
main()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[Any], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"a server exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise SystemExit(f"nothing listens on {port} after {timeout_s} s")


@contextlib.contextmanager
def _process(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[Any]]:
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _lerobot_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_LEROBOT_HOME=str(work / "hf"))
    return env


def _lerobot_server_times(work: Path, records: list[dict[str, Any]]) -> dict[int, float]:
    """request -> LeRobot's deserialization + Total time (s), from its debug log file."""
    text = "\n".join(p.read_text() for p in (work / "logs").glob("policy_server_*.log"))
    deserialize = {
        round(float(ts), 6): float(s)
        for ts, s in re.findall(r"Client timestamp: ([\d.]+) \| Deserialization time: ([\d.]+)s", text)
    }
    total = {
        int(n): float(ms) / 1e3
        for n, ms in re.findall(r"Action chunk #(\d+) generated \| Total time: ([\d.]+)ms", text)
    }
    out = {}
    for r in records:
        if r["server"] == "lerobot" and r["request"] in total:
            out[r["request"]] = total[r["request"]] + deserialize.get(round(r["timestamp"], 6), float("nan"))
    return out


def _hotloop_server_times(log: Path) -> dict[int, float]:
    found = re.findall(r"chunk #(\d+): ([\d.]+) ms of server work", log.read_text())
    return {int(n): float(ms) / 1e3 for n, ms in found}


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64) * 1e3
    return {
        "n": len(a),
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint", type=Path, help="a LeRobot 0.4.4 ACT checkpoint folder (default: make one)"
    )
    parser.add_argument("--artifact", type=Path, help="its `hotloop compile` artifact (default: compile it)")
    parser.add_argument(
        "--compile-args", default="", help="extra `hotloop compile` flags, e.g. --compile-args=--force"
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--camera", default="480x640", help="the robot's frame, HxW (the servers resize it)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lerobot-ab-"))
    checkpoint = args.checkpoint
    if checkpoint is None:
        checkpoint = work / "act"
        subprocess.run(
            [str(LEROBOT_PYTHON), str(MAKE_CHECKPOINT), str(checkpoint)], env=_lerobot_env(work), check=True
        )
    config = json.loads((checkpoint / "config.json").read_text())
    state = int(config["input_features"]["observation.state"]["shape"][0])
    camera = next(
        k.rsplit(".", 1)[1] for k in config["input_features"] if k.startswith("observation.images.")
    )
    artifact = args.artifact
    if artifact is None:
        artifact = work / "art"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "hotloop",
                "compile",
                str(checkpoint),
                "-o",
                str(artifact),
                *args.compile_args.split(),
            ],
            check=True,
        )
    h, w = (int(v) for v in args.camera.split("x"))
    lerobot_port, hotloop_port = _free_port(), _free_port()
    hotloop_log = work / "hotloop.log"
    lerobot_cmd = [str(LEROBOT_PYTHON), "-m", "lerobot.async_inference.policy_server", "--host=127.0.0.1",
                   f"--port={lerobot_port}", "--fps=30", "--inference_latency=0", "--obs_queue_timeout=10"]  # fmt: skip
    hotloop_cmd = [sys.executable, "-c", HOTLOOP_SERVER, str(hotloop_log), "serve", str(artifact), "--protocol", "lerobot",
                   "--port", str(hotloop_port), "--metrics-port", "0"]  # fmt: skip
    with (
        _process(lerobot_cmd, work, _lerobot_env(work), work / "lerobot.out") as lerobot,
        _process(hotloop_cmd, REPO, dict(os.environ), work / "hotloop.out") as hotloop,
    ):
        _wait_port(lerobot_port, lerobot)
        _wait_port(hotloop_port, hotloop)
        out = work / "records.json"
        spec = {
            "servers": {
                "lerobot": {"address": f"127.0.0.1:{lerobot_port}", "policy_type": "act", "path": str(checkpoint)},
                "hotloop": {"address": f"127.0.0.1:{hotloop_port}", "policy_type": "act", "path": str(artifact)},
            },
            "height": h, "width": w, "state": state, "camera": camera, "actions_per_chunk": int(config["chunk_size"]),
            "requests": args.requests, "warmup": args.warmup, "out": str(out),
        }  # fmt: skip
        subprocess.run([str(LEROBOT_PYTHON), str(REPO / "benchmarks" / "lerobot_async_ab_client.py"), json.dumps(spec)],
                       env=_lerobot_env(work), cwd=work, check=True)  # fmt: skip
        records = json.loads(out.read_text())
    timed = [r for r in records if not r["warmup"]]
    server = {"lerobot": _lerobot_server_times(work, timed), "hotloop": _hotloop_server_times(hotloop_log)}
    report: dict[str, Any] = {
        "load_average": os.getloadavg(),
        "camera": args.camera,
        "checkpoint": str(checkpoint),
        "artifact": str(artifact),
    }
    for name in ("lerobot", "hotloop"):
        mine = [r for r in timed if r["server"] == name]
        report[name] = {
            "round_trip": _stats([r["round_trip_s"] for r in mine]),
            "server": _stats([server[name][r["request"]] for r in mine if r["request"] in server[name]]),
        }
    for what in ("round_trip", "server"):
        report[f"{what}_ratio"] = {
            q: report["hotloop"][what][q] / report["lerobot"][what][q]
            for q in ("p50_ms", "p99_ms", "mean_ms")
        }
    first = {r["server"]: np.asarray(r["first"]) for r in records if r["first"] is not None}
    report["first_chunk_max_abs_diff"] = float(np.max(np.abs(first["hotloop"] - first["lerobot"])))
    print(json.dumps(report, indent=2))
    for what in ("server", "round_trip"):
        lr, hl, ratio = report["lerobot"][what], report["hotloop"][what], report[f"{what}_ratio"]
        print(f"{what:>10}: LeRobot p50 {lr['p50_ms']:.2f} / p99 {lr['p99_ms']:.2f} ms | hotloop p50 {hl['p50_ms']:.2f} / "
              f"p99 {hl['p99_ms']:.2f} ms | ratio p50 {ratio['p50_ms']:.3f}, p99 {ratio['p99_ms']:.3f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
