"""`lerobot-async`: LeRobot's stock async client in the closed loop: its threshold and its queue merge
(`robot_client._aggregate_action_queues` with `weighted_average`), replayed on a dict queue here."""

from __future__ import annotations

import numpy as np

from hotloop.realtime.strategies import ActiveChunk, StrategyConfig, make_strategy


def _client_merge(
    queue: dict[int, np.ndarray], latest: int, first_timestep: int, chunk: np.ndarray
) -> dict[int, np.ndarray]:
    """The stock client's merge, written as its code reads: drop timesteps <= latest, average where the
    queue holds the timestep (0.3 old + 0.7 new), keep only the incoming timesteps."""
    out = {}
    for i, action in enumerate(chunk):
        t = first_timestep + i
        if t <= latest:
            continue
        out[t] = 0.3 * queue[t] + 0.7 * action if t in queue else action
    return out


def test_the_merge_is_the_stock_clients():
    strategy = make_strategy("lerobot-async", StrategyConfig(10))
    period = 5
    rng = np.random.default_rng(0)
    old = ActiveChunk(rng.normal(size=(10, 3)), origin=100, next_index=6)  # timesteps 20..29, 20..25 executed
    new = rng.normal(size=(10, 3))
    obs_tick, ready_tick = 100 + 4 * period, 100 + 6 * period + 2  # observed at timestep 24, ready mid-26
    origin, first = strategy.splice(obs_tick, ready_tick, period)
    merged = strategy.merge(new, origin, first, old, period)
    queue = {20 + k: old.actions[k] for k in range(old.next_index, 10)}
    expected = _client_merge(queue, latest=26, first_timestep=24, chunk=new)
    assert first == 3 and sorted(expected) == list(range(27, 34))
    for t, action in expected.items():
        np.testing.assert_allclose(merged[t - 24], action, rtol=1e-12)


def test_it_asks_at_the_clients_threshold():
    strategy = make_strategy("lerobot-async", StrategyConfig(10))
    chunk = ActiveChunk(np.zeros((10, 2)), origin=0, next_index=4)
    assert not strategy.wants_inference(chunk)  # 6 of 10 left: above chunk_size_threshold 0.5
    chunk.next_index = 5
    assert strategy.wants_inference(chunk)  # 5 of 10 left
    assert make_strategy("lerobot-rtc-soft", StrategyConfig(10)).guided
    assert not strategy.guided
