"""The same stock client and checkpoint against LeRobot's own `policy_server` and `hotloop serve
--protocol lerobot`, side by side: an ACT checkpoint written by LeRobot 0.4.4's own code (which its
server loads), the robot's camera bigger than the checkpoint's so both servers resize it. The first chunk
(the robot's first observation) is the same from both, within float32 rounding of the two
implementations; the timestep labels are the same too."""

from __future__ import annotations

import numpy as np
import pytest
from lerobot_helpers import (
    LEROBOT_PYTHON,
    client_args,
    executed_came_from_chunks,
    hotloop_server,
    lerobot_policy_server,
    make_act_checkpoint,
    run_clients,
)

from hotloop.serve.lerobot.server import LeRobotServerThread

pytestmark = pytest.mark.slow  # LeRobot's client (and server) in their own venv
CHUNK, STATE, VIEWS = 20, 6, "front:120x160"


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    if not LEROBOT_PYTHON.is_file():
        pytest.fail(f"{LEROBOT_PYTHON} is missing: build it with `make lerobot-venv` (`make test` does)")
    work = tmp_path_factory.mktemp("side-by-side")
    checkpoint = make_act_checkpoint(work / "act", chunk=CHUNK, state=STATE, camera="front:96x128")
    common = dict(policy_type="act", actions_per_chunk=CHUNK, state_dim=STATE, action_dim=STATE, views=VIEWS)
    with (
        lerobot_policy_server(work) as lerobot,
        LeRobotServerThread(hotloop_server(str(checkpoint))) as hotloop,
    ):
        runs = [
            {"args": client_args(address, str(checkpoint), **common), "observations": 30}  # type: ignore[arg-type]
            for address in (lerobot, hotloop.address())
        ]
        lerobot_run, hotloop_run = run_clients(runs, work)
    return lerobot_run, hotloop_run


def test_both_servers_answer_the_same_first_chunk(both):
    lerobot_run, hotloop_run = both
    for run in both:
        assert run["started"] and not run["errors"] and len(run["received"]) > 1, run["errors"]
    ours, theirs = hotloop_run["received"][0], lerobot_run["received"][0]
    assert ours["timesteps"] == theirs["timesteps"] == list(range(CHUNK))
    assert ours["types"] == theirs["types"] == ["lerobot.async_inference.helpers.TimedAction"]
    first = np.asarray(theirs["actions"])
    assert np.ptp(first) > 0.1  # a chunk that says something (an untrained but seeded ACT)
    np.testing.assert_allclose(ours["actions"], first, rtol=0, atol=1e-4)


def test_the_stock_client_runs_on_both_alike(both):
    for run in both:
        assert executed_came_from_chunks(run) == []
