"""The served demo policy's spec accepts the simulator's own observation, unchanged."""

import pytest

from hotloop.demos.conveyor import load_demo_policy
from hotloop.serve.policies import observation_spec_of
from hotloop.serve.spec import check_observation
from hotloop.sim.tasks import make_task


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


@pytest.mark.parametrize("target", ["pi05:tiny", "pi0:tiny"])
def test_pi_targets_serve_with_the_state_length_they_declare(target):
    # pi0.5 writes each state entry as a prompt token: pi05:tiny takes 9 of its 32 padded entries, and
    # its spec used to ask for 32, so its warm-up inference (and `hotloop serve pi05:tiny`) failed.
    from hotloop.serve.policies import load_served_policy
    from hotloop.targets import TargetOptions

    served = load_served_policy(target, TargetOptions())
    assert served.observation_spec["state"].shape == (served.policy.spec.state_dim,)
    assert served.action_spec["actions"].shape == (served.policy.spec.horizon, served.policy.spec.action_dim)


def test_pi_targets_accept_the_rtc_keys_they_apply():
    from hotloop.realtime.rtc import DELAY_KEY, GUIDED_KEY, PREV_ACTIONS_KEY
    from hotloop.serve.policies import load_served_policy
    from hotloop.serve.spec import zero_observation
    from hotloop.targets import TargetOptions

    served = load_served_policy("pi05:tiny", TargetOptions())
    spec = served.observation_spec
    assert spec[PREV_ACTIONS_KEY].optional and spec[PREV_ACTIONS_KEY].shape == (
        -1,
        served.policy.spec.action_dim,
    )
    obs = check_observation({**zero_observation(spec), PREV_ACTIONS_KEY: [[0.1] * spec[PREV_ACTIONS_KEY].shape[1]] * 3,
                             DELAY_KEY: 1}, spec)  # fmt: skip
    assert served.policy.infer(obs)[GUIDED_KEY] is True
