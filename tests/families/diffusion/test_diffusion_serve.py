"""Serving a Diffusion checkpoint over the openpi wire: the observation spec comes from the checkpoint's
features, and each connection keeps its own observation history (`new_session`), so two robots at once
get exactly what each would get alone."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from diffusion_checkpoints import raw_observation

from hotloop.targets import TargetOptions, find_target


def _alone(ckpt: Path, observations: list[dict[str, Any]]) -> list[np.ndarray]:
    """What one robot gets from a fresh policy, observation after observation."""
    policy = find_target(str(ckpt)).build_policy(str(ckpt), TargetOptions())
    return [policy.infer(o)["actions"] for o in observations]


def test_two_connections_keep_separate_histories(tiny_ckpt: Path) -> None:
    from hotloop.client import PolicyClient, ServerError
    from hotloop.serve.policies import load_served_policy
    from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread

    served = load_served_policy(str(tiny_ckpt), TargetOptions())
    spec = served.observation_spec
    assert set(spec) == {"images/top", "state"}
    assert spec["images/top"].shape == (64, 64, 3) and spec["images/top"].dtype == "uint8"
    assert spec["state"].shape == (10,)
    streams = {"a": [raw_observation(i) for i in range(4)], "b": [raw_observation(10 + i) for i in range(4)]}
    got: dict[str, list[np.ndarray]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    with ServerThread(PolicyServer(served, ServeConfig(port=0))) as server:

        def robot(name: str) -> None:
            try:
                with PolicyClient(port=server.port) as client:
                    start.wait(timeout=30)
                    got[name] = [client.infer(o)["actions"] for o in streams[name]]
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=robot, args=(n,)) for n in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        with PolicyClient(port=server.port) as client:
            with pytest.raises(ServerError, match="'state' has shape"):
                client.infer({"images": streams["a"][0]["images"], "state": np.zeros(3, np.float32)})
            # a third robot later starts from an empty history of its own
            third = client.infer(streams["b"][0])["actions"]
    for name, observations in streams.items():
        want = _alone(tiny_ckpt, observations)
        for i, (g, w) in enumerate(zip(got[name], want, strict=True)):
            np.testing.assert_allclose(g, w, atol=1e-6, err_msg=f"robot {name}, request {i}")
    # the histories matter: the same observation after another one gives another chunk
    assert not np.allclose(got["a"][1], _alone(tiny_ckpt, [streams["a"][1]])[0])
    np.testing.assert_allclose(third, _alone(tiny_ckpt, [streams["b"][0]])[0], atol=1e-6)
