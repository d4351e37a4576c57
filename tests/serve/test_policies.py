"""The served demo policy's spec accepts the simulator's own observation, unchanged."""

import pytest

from hotloop.serve.policies import observation_spec_of
from hotloop.serve.spec import check_observation
from hotloop.sim.demo_policy import load_demo_policy
from hotloop.sim.tasks import make_task


@pytest.mark.slow  # loads the shipped model and renders one frame
def test_demo_policy_spec_takes_the_env_observation():
    spec = observation_spec_of(load_demo_policy())
    env = make_task("conveyor-pick")
    try:
        obs, _ = env.reset(seed=0)
    finally:
        env.close()
    checked = check_observation(obs, spec)
    assert checked["images"]["top"].shape == spec["images/top"].shape
    assert checked["state"].dtype.name == "float32" and checked["prompt"] == obs["prompt"]
