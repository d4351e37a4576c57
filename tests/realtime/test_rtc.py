"""RTC: the paper's soft mask and guidance weight, and the guided sampler on the shipped pi0.5 policy."""

import math

import numpy as np
import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.families.pi.rtc import guided_sample_actions
from hotloop.families.pi.sampling import sample_actions
from hotloop.realtime.rtc import (
    DELAY_KEY,
    GUIDED_KEY,
    MAX_GUIDANCE_WEIGHT_KEY,
    PREV_ACTIONS_KEY,
    guidance_weight,
    prefix_weights,
)


def test_soft_mask_is_the_papers():
    w = prefix_weights(delay=2, overlap=6, horizon=8)
    c = np.array([4, 3, 2, 1]) / 5  # (overlap - i) / (overlap - d + 1) for i = 2..5
    np.testing.assert_allclose(w, [1, 1, *(c * np.expm1(c) / (math.e - 1)), 0, 0])
    assert np.all(np.diff(w) <= 0)
    assert prefix_weights(0, 0, 4).tolist() == [0, 0, 0, 0]  # nothing to continue: no guidance
    assert prefix_weights(5, 3, 4).tolist() == [1, 1, 1, 0]  # d beyond the overlap: all of it frozen


def test_guidance_weight_is_clipped():
    assert guidance_weight(0.5, 5.0) == pytest.approx(2.0)  # (1/4 + 1/4) / (1/4)
    assert guidance_weight(0.9, 5.0) == 5.0 and guidance_weight(0.9, 100.0) == pytest.approx(0.82 / 0.09)
    assert guidance_weight(1.0, 5.0) == 5.0 and guidance_weight(0.0, 7.0) == 7.0


@pytest.fixture(scope="module")
def demo():
    from hotloop.demos.conveyor import load_demo_policy
    from hotloop.sim.tasks import make_task

    policy = load_demo_policy()
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=3)
    policy.reset()
    first = policy.infer(obs)["actions"]
    for _ in range(3):  # the robot holds the first action for 3 periods: the old plan is now off
        env.advance(first[0], env.config.ticks_per_control)
    return policy, env.observe(), first[3:]


def test_zero_weights_is_plain_sampling(demo):
    policy, obs, _ = demo
    pi = policy.pi
    model_obs = pi.observation(policy.model_inputs(obs))
    noise = torch.zeros(1, pi.config.chunk_size, pi.config.max_action_dim)
    plain = sample_actions(pi.model, model_obs, noise=noise)
    guided = guided_sample_actions(
        pi.model, model_obs, torch.ones_like(noise), torch.zeros(pi.config.chunk_size), 5.0, noise=noise
    )
    torch.testing.assert_close(guided, plain, rtol=0, atol=1e-5)


def test_guided_chunk_follows_the_executing_one(demo):
    """The frozen prefix (first d actions) is pulled onto the previous chunk's actions, harder with a
    larger clip beta; the policy says it applied the guidance."""
    policy, obs, prev = demo
    d = 3
    free = policy.infer(obs)["actions"]
    gaps = []
    for beta in (5.0, 50.0):
        out = policy.infer({**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: d, MAX_GUIDANCE_WEIGHT_KEY: beta})
        assert out[GUIDED_KEY] is True and out["actions"].shape == free.shape
        gaps.append(np.abs(out["actions"][:d, :3] - prev[:d, :3]).mean())
    free_gap = np.abs(free[:d, :3] - prev[:d, :3]).mean()
    assert free_gap > 0.01  # the test case has a real discontinuity to remove
    assert gaps[1] < gaps[0] < free_gap, (free_gap, gaps)
    assert GUIDED_KEY not in policy.infer(obs)  # no guidance asked, none claimed


def test_guidance_with_the_wrong_action_width_is_refused(demo):
    policy, obs, prev = demo
    with pytest.raises(ConfigError, match="action columns"):
        policy.infer({**obs, PREV_ACTIONS_KEY: prev[:, :3], DELAY_KEY: 1})


def test_rtc_refuses_a_policy_that_ignores_guidance():
    from rt_fakes import FakeRobot

    from hotloop.realtime.clock import FakeClock
    from hotloop.realtime.runner import SimulatedEngine, WallClockRunner
    from hotloop.realtime.strategies import StrategyConfig, make_strategy

    class Unguided:
        def reset(self):
            pass

        def infer(self, obs):
            return {"actions": np.full((10, 4), 0.1)}

    clock = FakeClock()
    runner = WallClockRunner(
        Unguided(),
        FakeRobot(np.full(4, 0.1)),
        lambda h: make_strategy("rtc", StrategyConfig(h)),
        10.0,
        clock=clock,
        engine=SimulatedEngine(Unguided(), clock.tick_s, lambda ms: 30.0),
    )
    with pytest.raises(ConfigError, match="ignored them"):
        runner.run(2.0)
