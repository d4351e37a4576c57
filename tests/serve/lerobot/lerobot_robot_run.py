"""Drive LeRobot's stock async `RobotClient` against a policy server (run by .venv-lerobot's python).

    python lerobot_robot_run.py '<json>'   ->  the results as JSON in the spec's "out" file

The json holds `runs`, each `{"args": [robot_client CLI flags], "observations": N, "actions": M,
"timeout_s": T}`. Each
run parses its flags with LeRobot's own config (`RobotClientConfig`, draccus, as `python -m
lerobot.async_inference.robot_client` does) and runs what its `async_client` runs: `start()` (Ready +
policy instructions), the action receiver thread and the control loop, on the stand-in robot
(`standin_robot`). The client is LeRobot's, unchanged; three of its methods are wrapped to record, never
to alter: what it sent (timestep, must_go, whether the RPC succeeded), every chunk it received (as it
unpickled it) and every action it executed with its timestep. The run stops once N observations were sent and M actions executed.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any

import draccus
import standin_robot  # noqa: F401  (registers robot type hotloop_standin)
from lerobot.async_inference.configs import RobotClientConfig
from lerobot.async_inference.robot_client import RobotClient


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.lines.append(record.getMessage()[:2000])


def run_one(args: list[str], observations: int, actions: int, timeout_s: float) -> dict[str, Any]:
    cfg = draccus.parse(RobotClientConfig, args=args)
    records = _Records()
    RobotClient.logger.addHandler(records)
    client = RobotClient(cfg)
    sent: list[list[Any]] = []
    received: list[dict[str, Any]] = []
    executed: list[list[Any]] = []

    send = client.send_observation

    def recording_send(obs: Any) -> bool:
        ok = send(obs)
        sent.append([obs.get_timestep(), bool(obs.must_go), bool(ok)])
        if len(sent) >= observations and len(executed) >= actions:
            client.shutdown_event.set()
        return ok

    aggregate = client._aggregate_action_queues
    acting = threading.Event()  # set while the control loop is inside control_loop_action
    entered = [0]  # control_loop_action calls begun

    def recording_aggregate(incoming: Any, aggregate_fn: Any = None) -> None:
        # The stock client's own race: the control loop pops action t, sends it, then sets latest_action;
        # a merge in between reads the old latest_action and queues t again. Recorded, not prevented.
        raced, before = acting.is_set(), entered[0]
        latest = client.latest_action
        aggregate(incoming, aggregate_fn)
        received.append(
            {
                "raced": raced or acting.is_set() or entered[0] != before,
                "latest_at_arrival": latest,
                "timesteps": [a.get_timestep() for a in incoming],
                "timestamps": [a.get_timestamp() for a in incoming],
                "actions": [a.get_action().tolist() for a in incoming],
                "types": sorted({f"{type(a).__module__}.{type(a).__qualname__}" for a in incoming}),
                "tensor": sorted(
                    {
                        f"{a.get_action().dtype}/{a.get_action().device}/{a.get_action().ndim}"
                        for a in incoming
                    }
                ),
            }
        )

    act = client.control_loop_action

    def recording_act(verbose: bool = False) -> Any:
        acting.set()
        entered[0] += 1
        try:
            out = act(verbose)
        finally:
            acting.clear()
        executed.append([client.latest_action, [out[k] for k in client.robot.action_features]])
        return out

    client.send_observation = recording_send  # type: ignore[method-assign]
    client._aggregate_action_queues = recording_aggregate  # type: ignore[method-assign]
    client.control_loop_action = recording_act  # type: ignore[method-assign]

    watchdog = threading.Timer(timeout_s, client.shutdown_event.set)  # a hung server ends the run
    watchdog.start()
    start = time.perf_counter()
    started = client.start()
    if started:
        receiver = threading.Thread(target=client.receive_actions, daemon=True)
        receiver.start()
        try:
            client.control_loop(task=cfg.task)
        finally:
            # Closing the channel fails the receiver's pending GetActions ("Channel closed"): the
            # client's own shutdown, not an error of the server's.
            RobotClient.logger.removeHandler(records)
            client.stop()
            receiver.join(timeout=10)
    else:
        client.stop()
    watchdog.cancel()
    RobotClient.logger.removeHandler(records)
    return {
        "started": started,
        "seconds": time.perf_counter() - start,
        "sent": sent,
        "received": received,
        "executed": executed,
        "robot_sent": client.robot.sent,
        "errors": records.lines,
        "timed_out": started and (len(sent) < observations or len(executed) < actions),
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    results = [
        run_one(r["args"], r["observations"], r.get("actions", r["observations"]), r.get("timeout_s", 120.0))
        for r in spec["runs"]
    ]
    with open(spec["out"], "w") as f:  # stdout carries LeRobot's own log lines
        json.dump({"runs": results}, f)


if __name__ == "__main__":
    main()
