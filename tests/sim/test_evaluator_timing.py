"""Which action runs at which simulated time, per strategy, with a fake policy of known latency.

The control period is 50 physics ticks (100 ms at 2 ms); trace rows are (start_tick, end_tick, chunk,
action index), index -1 = holding the last target.
"""

import numpy as np
import pytest
from fakes import CountingPolicy

from hotloop.closedloop.evaluator import run_episode, summarize
from hotloop.closedloop.latency import parse_latency
from hotloop.errors import ConfigError, UnknownNameError
from hotloop.realtime.strategies import StrategyConfig, make_strategy
from hotloop.sim.tasks import make_task


@pytest.fixture(scope="module")
def env():
    return make_task("reach")


def _trace(env, name, latency, **kw):
    policy = CountingPolicy(horizon=10)
    rec = run_episode(
        env,
        policy,
        lambda h: make_strategy(name, StrategyConfig(h, **kw)),
        parse_latency(latency),
        seed=1,
        trace=True,
    )
    return rec


def test_sync_zero_latency_replans_every_period(env):
    rec = _trace(env, "sync", "fixed:0")
    assert rec["trace"][:3] == [(0, 50, 0, 0), (50, 100, 1, 0), (100, 150, 2, 0)]
    assert rec["inference_ticks"][:3] == [(0, 0), (50, 50), (100, 100)]


def test_sync_holds_while_the_policy_thinks(env):
    rec = _trace(env, "sync", "fixed:100")
    assert rec["trace"][:4] == [(0, 50, -1, -1), (50, 100, 0, 0), (100, 150, -1, -1), (150, 200, 1, 0)]
    # the observation is taken when inference starts, the chunk starts when it is ready
    assert rec["inference_ticks"][:2] == [(0, 50), (100, 150)]


def test_chunk_executes_n_actions_then_holds(env):
    rec = _trace(env, "chunk", "fixed:30", execute_steps=3)  # 30 ms = 15 ticks: not rounded to a period
    assert rec["trace"][:6] == [
        (0, 15, -1, -1),
        (15, 65, 0, 0),
        (65, 115, 0, 1),
        (115, 165, 0, 2),
        (165, 180, -1, -1),
        (180, 230, 1, 0),
    ]


def test_async_overlaps_and_drops_stale_actions(env):
    rec = _trace(env, "async", "fixed:120", trigger_remaining=5)
    # First chunk: observed at 0, ready at 60; actions 0 and 1 (for 0-100) are stale, action 2 starts at 100.
    # Next inference starts at 250 when 5 actions remain, is ready at 310, so its actions 0-1 are dropped
    # and its action 2 replaces the old chunk's action 7 at 350.
    assert rec["trace"][:8] == [
        (0, 60, -1, -1),
        (60, 100, -1, -1),
        (100, 150, 0, 2),
        (150, 200, 0, 3),
        (200, 250, 0, 4),
        (250, 300, 0, 5),
        (300, 350, 0, 6),
        (350, 400, 1, 2),
    ]
    assert rec["inference_ticks"][:2] == [(0, 60), (250, 310)]


def test_executed_action_is_the_scheduled_one(env):
    class Probe(CountingPolicy):
        def infer(self, obs):
            self.seen.append(float(obs["state"][3]))
            return super().infer(obs)

    policy = Probe(horizon=10)
    policy.seen = []
    run_episode(
        env,
        policy,
        lambda h: make_strategy("chunk", StrategyConfig(h, execute_steps=2)),
        parse_latency("fixed:0"),
        seed=2,
    )
    # hold_action keeps the last executed target: chunk c, action 1 has grip (100c + 1) / 1e4
    assert env.hold_action()[3] == pytest.approx((100 * (policy.calls - 1) + 1) / 1e4, abs=1e-6)


def test_bad_strategy_settings():
    with pytest.raises(UnknownNameError, match="async"):
        make_strategy("asynch", StrategyConfig(10))
    with pytest.raises(ConfigError, match="execute-steps"):
        StrategyConfig(10, execute_steps=11)


def test_async_default_replans_at_half_the_chunk(env):
    # Horizon 10, 0 ms: the next inference starts when 5 actions remain, so each chunk runs 5 actions.
    assert make_strategy("async", StrategyConfig(16)).describe()["trigger_remaining"] == 8
    rec = _trace(env, "async", "fixed:0")
    per_chunk = {}
    for _, _, chunk, index in rec["trace"]:
        if index >= 0:
            per_chunk.setdefault(chunk, []).append(index)
    full = [v for c, v in per_chunk.items() if c < max(per_chunk)]  # the last chunk may be cut short
    assert full and all(v == [0, 1, 2, 3, 4] for v in full)


def test_summary_counts_errors_apart_from_failures():
    ok = {
        "seed": 0,
        "success": True,
        "task_time_s": 1.0,
        "jerk": 1.0,
        "chunk_discontinuity": 0.01,
        "boundaries": 2,
        "sim_time_s": 4.0,
        "error": None,
    }
    bad = {
        "seed": 1,
        "success": False,
        "task_time_s": None,
        "jerk": None,
        "chunk_discontinuity": None,
        "boundaries": 0,
        "error": "worker died",
    }
    s = summarize([ok, bad])
    # The crash is an error, not a failure: the rate is over the one completed episode.
    assert s["episodes"] == 2 and s["errors"] == 1 and s["error_seeds"] == [1]
    assert s["completed"] == 1 and s["failures"] == 0 and s["success_rate"] == 1.0
    assert np.isclose(s["chunk_discontinuity"], 0.01)
    assert np.isclose(s["chunk_jump_per_s"], 0.02 / 4.0)  # two 1 cm jumps in 4 s: 5 mm/s
