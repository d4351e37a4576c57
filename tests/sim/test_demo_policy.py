"""The shipped demo policy: loads offline from package assets, and drives the robot in closed loop."""

import numpy as np

from hotloop.closedloop.evaluator import run_episode, summarize
from hotloop.closedloop.latency import parse_latency
from hotloop.demos.conveyor import ASSET_DIR, load_demo_policy, model_state, to_absolute, to_relative
from hotloop.realtime.strategies import StrategyConfig, make_strategy
from hotloop.sim.tasks import make_task
from hotloop.targets import TargetOptions, default_targets


def test_transforms_round_trip():
    rng = np.random.default_rng(0)
    state = rng.normal(size=10).astype(np.float32)
    actions = rng.normal(size=(16, 4)).astype(np.float32)
    np.testing.assert_allclose(to_absolute(to_relative(actions, state), state), actions, atol=1e-6)
    np.testing.assert_allclose(model_state(state)[4:7], state[4:7] - state[0:3], atol=1e-6)


def test_shipped_weights_load_offline(monkeypatch):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("the demo policy must load without network access")

    # Patch what opens connections, not the socket class itself: modules imported lazily below (ssl, via
    # torch) subclass socket.socket, and replacing the class with a function breaks their import.
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    assert (ASSET_DIR / "model.safetensors").stat().st_size < 10_000_000  # a few MB ship in the wheel
    policy = default_targets().get("demo:conveyor").build_policy("demo:conveyor", TargetOptions())
    env = make_task("conveyor-pick")
    obs, _ = env.reset(seed=0)
    policy.reset()
    actions = policy.infer(obs)["actions"]
    assert actions.shape == (policy.horizon, 4) and np.all(np.isfinite(actions))
    policy.reset()
    np.testing.assert_array_equal(actions, policy.infer(obs)["actions"])  # seeded noise: repeatable


def test_closed_loop_smoke():
    policy = load_demo_policy()
    env = make_task("conveyor-pick")
    records = [
        run_episode(
            env, policy, lambda h, s=s: make_strategy(s, StrategyConfig(h)), parse_latency("fixed:0"), seed
        )
        for s, seed in (("sync", 0), ("async", 1), ("sync", 2))
    ]
    summary = summarize(records)
    assert summary["errors"] == 0
    assert all(r["inferences"] > 0 and r["sim_time_s"] > 0 for r in records)
    # The shipped policy picked 50/50 under sync and under async at 0 ms (docs/closed-loop.md); a change to
    # the model code, the adapter or the evaluator that costs it an episode here is a regression.
    assert summary["successes"] == 3, [r["success"] for r in records]


def test_rtc_guidance_reaches_the_demo_policy_through_the_evaluators_adapter():
    """`hotloop eval` wraps every policy in the adapter; the RTC inputs must cross it both ways, or
    `--strategy rtc` stops with "this policy ignored them" (it did after the adapter landed)."""
    from hotloop.closedloop.adapter import adapt
    from hotloop.realtime.rtc import DELAY_KEY, GUIDED_KEY, PREV_ACTIONS_KEY

    env = make_task("conveyor-pick")
    policy = adapt(load_demo_policy(), env.task_spec)
    obs, _ = env.reset(seed=0)
    policy.reset()
    free = policy.infer(obs)["actions"]
    prev = free[:8].copy()
    prev[:, 0] += 0.03  # an executing chunk 3 cm off this one: the guided chunk must move toward it
    out = policy.infer({**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2})
    assert out[GUIDED_KEY] is True and out["actions"].shape == free.shape
    assert np.abs(out["actions"][:2, 0] - prev[:2, 0]).mean() < np.abs(free[:2, 0] - prev[:2, 0]).mean()


def test_the_chain_policy_is_its_own_weights_trained_on_a_noisy_box_state():
    from hotloop.demos.conveyor import CHAIN_ASSET_DIR

    chain = default_targets().get("demo:conveyor-chain").build_policy("demo:conveyor-chain", TargetOptions())
    plain = default_targets().get("demo:conveyor").build_policy("demo:conveyor", TargetOptions())
    assert (CHAIN_ASSET_DIR / "model.safetensors").read_bytes() != (
        ASSET_DIR / "model.safetensors"
    ).read_bytes()
    noise = chain.meta["state_noise"]  # what it was trained for, stated beside the weights
    assert noise["box_xy_mm"] > 0 and noise["box_velocity_xy_mms"] > 0
    assert plain.meta.get("state_noise") is None
    assert (
        default_targets().get("demo:conveyor-chain").declared_horizon("demo:conveyor-chain") == chain.horizon
    )
    obs, _ = make_task("conveyor-pick").reset(seed=3)
    chain.reset()
    actions = chain.infer(obs)["actions"]
    assert actions.shape == (chain.horizon, 4) and np.all(np.isfinite(actions))
