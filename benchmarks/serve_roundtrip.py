"""Policy-server round trip on loopback, inference excluded (issue 10's serving targets).

1. One client, one 224x224x3 uint8 view + a 32-float state per observation, a (50, 32) chunk back:
   round-trip p50/p99 (target: p50 <= 2 ms, p99 <= 5 ms).
2. `--clients` concurrent clients (default 50) for `--duration` seconds (target: 60 s) each sending
   observations that name themselves; every reply must arrive within `--reply-timeout` and answer the
   observation it was sent for (no lost or mismatched reply).

The server runs in its own process (as in production: the model process is not the robot's), with a no-op
policy that echoes (client id, sequence number) into the chunk so a mismatch cannot hide. The clients run
in `--client-procs` processes of threads. Report the machine's load: the figures mean nothing on a busy one.

    PYTHONPATH=src python benchmarks/serve_roundtrip.py --iters 5000 --clients 50 --duration 60 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

STATE_DIM, HORIZON, IMAGE = 32, 50, 224


class EchoPolicy:
    """No inference: the chunk repeats the observed state (whose first two entries name the request)."""

    def __init__(self) -> None:
        from hotloop.serve.spec import ArraySpec

        self.observation_spec = {
            "images/top": ArraySpec((IMAGE, IMAGE, 3), "uint8"),
            "state": ArraySpec((STATE_DIM,), "float32"),
        }

    def reset(self) -> None:
        pass

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"actions": np.broadcast_to(obs["state"], (HORIZON, STATE_DIM)).copy()}


def _serve(port_queue: Any, max_connections: int) -> None:
    from hotloop.serve.policies import serve_policy
    from hotloop.serve.server import PolicyServer, ServeConfig

    config = ServeConfig(port=0, max_connections=max_connections)
    server = PolicyServer(serve_policy("echo", EchoPolicy()), config)

    async def main() -> None:
        await server.start()
        port_queue.put(server.port)
        await server._ws_server.serve_forever()

    asyncio.run(main())


def _observation(client: int, seq: int, rng: np.random.Generator) -> dict[str, Any]:
    state = rng.standard_normal(STATE_DIM).astype(np.float32)
    state[0], state[1] = client, seq  # exact in float32 below 2**24
    return {"images": {"top": rng.integers(0, 255, (IMAGE, IMAGE, 3), dtype=np.uint8)}, "state": state}


def single_client(port: int, warmup: int, iters: int) -> list[float]:
    from hotloop.client import PolicyClient

    rng = np.random.default_rng(0)
    obs = [_observation(0, i, rng) for i in range(16)]  # pre-built: the client's own work is not the server's
    samples = []
    with PolicyClient(port=port) as client:
        for i in range(warmup + iters):
            start = time.perf_counter()
            client.infer(obs[i % len(obs)])
            if i >= warmup:
                samples.append((time.perf_counter() - start) * 1e3)
    return samples


def _client_process(port: int, ids: list[int], duration_s: float, reply_timeout_s: float, out: Any) -> None:
    from hotloop.client import PolicyClient

    results: dict[int, dict[str, Any]] = {}

    def run(client_id: int) -> None:
        rng = np.random.default_rng(client_id)
        pool = [_observation(client_id, 0, rng) for _ in range(4)]
        sent = answered = mismatched = 0
        errors: list[str] = []
        latencies: list[float] = []
        try:
            with PolicyClient(port=port, reply_timeout_s=reply_timeout_s) as client:
                end = time.monotonic() + duration_s
                while time.monotonic() < end:
                    obs = pool[sent % len(pool)]
                    obs["state"][1] = sent
                    start = time.perf_counter()
                    sent += 1
                    reply = client.infer(obs)
                    latencies.append((time.perf_counter() - start) * 1e3)
                    answered += 1
                    a = reply["actions"]
                    if (
                        not (np.all(a[:, 0] == client_id) and np.all(a[:, 1] == sent - 1))
                        or reply["request_id"] != sent - 1
                    ):
                        mismatched += 1
        except Exception as exc:  # a lost reply (timeout) or a dropped connection: counted, reported
            errors.append(f"{type(exc).__name__}: {exc}")
        results[client_id] = {
            "sent": sent,
            "answered": answered,
            "mismatched": mismatched,
            "errors": errors,
            "latencies_ms": latencies,
        }

    threads = [threading.Thread(target=run, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=duration_s + reply_timeout_s + 30)
    out.put(results)


def concurrent_clients(
    port: int, clients: int, procs: int, duration_s: float, reply_timeout_s: float
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    groups = [list(range(clients))[p::procs] for p in range(procs)]
    workers = [
        ctx.Process(target=_client_process, args=(port, g, duration_s, reply_timeout_s, out))
        for g in groups
        if g
    ]
    for w in workers:
        w.start()
    merged: dict[int, dict[str, Any]] = {}
    for _ in workers:
        merged.update(out.get(timeout=duration_s + reply_timeout_s + 120))
    for w in workers:
        w.join(timeout=30)
    latencies = np.concatenate([np.asarray(r["latencies_ms"]) for r in merged.values()])
    sent = sum(r["sent"] for r in merged.values())
    answered = sum(r["answered"] for r in merged.values())
    from hotloop.measure.stats import LatencyStats

    return {
        "clients": clients,
        "clients_reporting": len(merged),
        "duration_s": duration_s,
        "sent": sent,
        "answered": answered,
        "lost": sent - answered + (clients - len(merged)),
        "mismatched": sum(r["mismatched"] for r in merged.values()),
        "errors": [e for r in merged.values() for e in r["errors"]],
        "replies_per_s": answered / duration_s,
        "latency_ms": LatencyStats.from_samples(latencies).to_dict() if latencies.size else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--iters", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--client-procs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of the concurrent phase")
    parser.add_argument("--reply-timeout", type=float, default=5.0, help="a reply later than this is lost")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import psutil

    from hotloop.measure.fingerprint import machine_fingerprint
    from hotloop.measure.stats import LatencyStats

    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)  # fail before the work, not after
        args.json.touch()
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    # Room for every client and the single-client run (`hotloop serve --max-connections`).
    server = ctx.Process(target=_serve, args=(ports, args.clients + 1), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=120)
        server_proc = psutil.Process(server.pid)
        server_cpu, client_cpu = sum(server_proc.cpu_times()[:2]), time.process_time()
        single = LatencyStats.from_samples(single_client(port, args.warmup, args.iters))
        n = args.warmup + args.iters
        # CPU time per round trip does not depend on other load: what the round trip costs on an idle machine.
        cpu_ms = {
            "server": (sum(server_proc.cpu_times()[:2]) - server_cpu) / n * 1e3,
            "client": (time.process_time() - client_cpu) / n * 1e3,
        }
        print(
            f"single client, {args.iters} round trips: p50 {single.p50:.3f} ms  p99 {single.p99:.3f} ms  "
            f"(CPU per round trip: server {cpu_ms['server']:.3f} ms, client {cpu_ms['client']:.3f} ms; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
        )
        many = concurrent_clients(port, args.clients, args.client_procs, args.duration, args.reply_timeout)
        lat = many["latency_ms"] or {}
        print(
            f"{args.clients} clients x {args.duration:.0f} s: {many['answered']} replies "
            f"({many['replies_per_s']:.0f}/s), lost {many['lost']}, mismatched {many['mismatched']}, "
            f"p50 {lat.get('p50', float('nan')):.2f} ms p99 {lat.get('p99', float('nan')):.2f} ms"
        )
        for error in many["errors"][:5]:
            print(f"  client error: {error}")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        dropped = [ln for ln in metrics.splitlines() if ln.startswith("hotloop_dropped_observations_total")]
    finally:
        server.terminate()
        server.join(timeout=10)
    result = {
        "benchmark": "serve_roundtrip",
        "command": " ".join(sys.argv),
        "single_client_ms": single.to_dict(),
        "cpu_ms_per_round_trip": cpu_ms,
        "concurrent": {k: v for k, v in many.items()},
        "server_dropped": dropped,
        "targets": {"p50_ms": 2.0, "p99_ms": 5.0, "concurrent_s": 60, "lost": 0, "mismatched": 0},
        "machine": machine_fingerprint(),
    }
    if args.json is not None:
        from hotloop.io import atomic_write_json

        print(f"wrote {atomic_write_json(args.json, result)}")
    else:
        print(json.dumps({k: result[k] for k in ("single_client_ms", "server_dropped")}, indent=1))
    ok = many["lost"] == 0 and many["mismatched"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
