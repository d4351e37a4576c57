"""The client of `lerobot_async_ab.py`, run by .venv-lerobot's python: LeRobot's own generated stubs,
classes and chunked sender, one observation at a time to each server in turn (interleaved, the order
alternating), exactly the calls the stock `RobotClient` makes per chunk: pickle a `TimedObservation`,
`SendObservations` in 2 MiB chunks, `GetActions`, unpickle the `TimedAction` list.

    python lerobot_async_ab_client.py SPEC_JSON   (written by lerobot_async_ab.py)
"""

from __future__ import annotations

import json
import pickle
import sys
import time

import grpc
import numpy as np
from lerobot.async_inference.helpers import RemotePolicyConfig, TimedObservation
from lerobot.datasets.utils import hw_to_dataset_features
from lerobot.transport import services_pb2, services_pb2_grpc
from lerobot.transport.utils import grpc_channel_options, send_bytes_in_chunks


def main() -> None:
    spec = json.loads(sys.argv[1])
    h, w, d, camera = spec["height"], spec["width"], spec["state"], spec["camera"]
    hardware = {**{f"j{i}.pos": float for i in range(d)}, camera: (h, w, 3)}
    features = hw_to_dataset_features(hardware, "observation", use_video=False)
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    stubs = {}
    for name, server in spec["servers"].items():
        channel = grpc.insecure_channel(server["address"], grpc_channel_options())
        stub = services_pb2_grpc.AsyncInferenceStub(channel)
        stub.Ready(services_pb2.Empty())
        config = RemotePolicyConfig(
            server["policy_type"], server["path"], features, spec["actions_per_chunk"], "cpu"
        )
        stub.SendPolicyInstructions(services_pb2.PolicySetup(data=pickle.dumps(config)))
        stubs[name] = stub
    names = list(stubs)
    records = []
    for i in range(spec["warmup"] + spec["requests"]):
        joints = {f"j{k}.pos": float(v) for k, v in enumerate(rng.normal(size=d))}
        for name in names if i % 2 == 0 else names[::-1]:
            timestamp = time.time()
            obs = TimedObservation(
                timestamp=timestamp,
                observation={**joints, camera: image, "task": ""},
                timestep=i,
                must_go=True,
            )
            start = time.perf_counter()
            stubs[name].SendObservations(
                send_bytes_in_chunks(pickle.dumps(obs), services_pb2.Observation, silent=True)
            )
            reply = stubs[name].GetActions(services_pb2.Empty())
            actions = pickle.loads(reply.data)  # nosec: the benchmark's own servers
            elapsed = time.perf_counter() - start
            records.append(
                {
                    "server": name,
                    "request": i,
                    "warmup": i < spec["warmup"],
                    "timestamp": timestamp,
                    "round_trip_s": elapsed,
                    "actions": len(actions),
                    "first": [a.get_action().tolist() for a in actions] if i == 0 else None,
                }
            )
    with open(spec["out"], "w") as f:
        json.dump(records, f)


if __name__ == "__main__":
    main()
