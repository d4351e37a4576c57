"""The server's deadline watchdog on the wall clock: how long after a missed deadline the fallback engine's
reply reaches the client (`hotloop serve --deadline-ms D --fallback engine:TARGET`).

One client sends one small observation every `--period-ms` (a robot asking at its policy rate); every
`--stall-every`-th request makes the main policy sleep `--stall-ms` (a real stall: the model thread is
busy), every other one answers at once. A stalled request always finds the model idle (checked from the
arguments), so its round trip minus the deadline is the watchdog's overshoot: the event loop waking at
the deadline, the fallback engine's inference (an echo here) and the loopback reply. Requests sent while
the model still sleeps are answered by the engine at once (counted), the first in-time one after it
returns the server to normal. Run it on an otherwise idle machine
and report the load average printed with the figures.

    PYTHONPATH=src python benchmarks/serve_watchdog.py --deadline-ms 50 --stall-ms 300 --period-ms 50 \
        --requests 400 --json serve_watchdog.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

STATE_DIM = 8


class StallingEcho:
    """Echoes the state; sleeps `stall_s` on requests whose state[0] is 1 (the benchmark marks them)."""

    def __init__(self, stall_s: float) -> None:
        from hotloop.serve.spec import ArraySpec

        self.observation_spec = {"state": ArraySpec((STATE_DIM,), "float32")}
        self.stall_s = stall_s

    def reset(self) -> None:
        pass

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        if float(obs["state"][0]) == 1.0:
            time.sleep(self.stall_s)
        return {"actions": np.tile(obs["state"], (10, 1))}


class SmallEngine(StallingEcho):
    def __init__(self) -> None:
        super().__init__(0.0)

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"actions": np.full((4, STATE_DIM), -1.0, dtype=np.float32)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deadline-ms", type=float, default=50.0)
    parser.add_argument("--stall-ms", type=float, default=300.0)
    parser.add_argument("--stall-every", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--period-ms", type=float, default=50.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not (args.stall_ms > args.deadline_ms > 0 and args.stall_every >= 2 and args.requests >= 1):
        sys.exit("error: need --stall-ms > --deadline-ms > 0, --stall-every >= 2, --requests >= 1")
    if args.stall_every * args.period_ms <= args.stall_ms + args.deadline_ms:
        sys.exit("error: --stall-every x --period-ms must exceed --stall-ms + --deadline-ms (an idle model)")

    from hotloop.client import PolicyClient
    from hotloop.serve.policies import serve_policy
    from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread

    server = PolicyServer(
        serve_policy("stalling", StallingEcho(args.stall_ms / 1e3)),
        ServeConfig(port=0, deadline_ms=args.deadline_ms),
        fallback=serve_policy("small", SmallEngine()),
    )
    overshoot_ms: list[float] = []
    in_time_ms: list[float] = []
    by_source = {"policy": 0, "fallback": 0}
    with ServerThread(server) as thread, PolicyClient(port=thread.port) as client:
        start = time.perf_counter()
        for i in range(args.requests):
            time.sleep(max(0.0, start + i * args.period_ms / 1e3 - time.perf_counter()))
            stall = i % args.stall_every == args.stall_every - 1
            obs = {"state": np.full(STATE_DIM, 1.0 if stall else 0.0, dtype=np.float32)}
            t0 = time.perf_counter()
            reply = client.infer(obs)
            rtt_ms = (time.perf_counter() - t0) * 1e3
            source = "fallback" if "fallback" in reply else "policy"
            by_source[source] += 1
            if stall:
                if source != "fallback":
                    sys.exit(f"error: stalled request {i} was answered by the main policy")
                overshoot_ms.append(rtt_ms - args.deadline_ms)
            elif source == "policy":
                in_time_ms.append(rtt_ms)
        counters = server.watchdog.counters() if server.watchdog is not None else {}

    def stats(x: list[float]) -> dict[str, float | None]:
        a = np.asarray(x)
        if not a.size:
            return {"n": 0, "p50": None, "p99": None, "max": None}
        return {
            "n": int(a.size),
            "p50": float(np.percentile(a, 50)),
            "p99": float(np.percentile(a, 99)),
            "max": float(a.max()),
        }

    result = {
        "deadline_ms": args.deadline_ms,
        "stall_ms": args.stall_ms,
        "stall_every": args.stall_every,
        "period_ms": args.period_ms,
        "requests": args.requests,
        "replies": by_source,
        "overshoot_after_deadline_ms": stats(overshoot_ms),
        "in_time_round_trip_ms": stats(in_time_ms),
        "watchdog": counters,
        "load_avg": list(os.getloadavg()),
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
