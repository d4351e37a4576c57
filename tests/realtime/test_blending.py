"""Blending for the non-RTC strategies: latest-only, weighted average, ACT temporal ensembling."""

import math

import numpy as np
import pytest

from hotloop.errors import ConfigError
from hotloop.realtime.blending import BlendConfig, ChunkBlender

PERIOD = 50


def _chunk(value: float, n: int = 4) -> np.ndarray:
    return np.full((n, 2), value) + np.arange(n)[:, None] * 0.1


def test_latest_is_the_newest_chunk_alone():
    b = ChunkBlender(BlendConfig("latest"), PERIOD)
    b.add(_chunk(0.0), origin=0)
    b.add(_chunk(1.0), origin=100)
    np.testing.assert_array_equal(b.action(_chunk(1.0), 0, 100), _chunk(1.0)[0])


def test_average_weighs_the_replaced_plan_where_it_overlaps():
    b = ChunkBlender(BlendConfig("average", new_weight=0.75), PERIOD)
    old, new = _chunk(0.0), _chunk(1.0)
    b.add(old, origin=0)
    b.add(new, origin=100)  # new action 0 and old action 2 are both for the period at tick 100
    np.testing.assert_allclose(b.action(new, 0, 100), 0.75 * new[0] + 0.25 * old[2])
    # Past the old chunk's end only the new one plans: it is used alone.
    np.testing.assert_array_equal(b.action(new, 3, 250), new[3])


def test_ensemble_uses_acts_exponential_weights_oldest_first():
    m = 0.5
    b = ChunkBlender(BlendConfig("ensemble", ensemble_decay=m), PERIOD)
    chunks = [(_chunk(float(c)), 50 * c) for c in range(3)]  # replanned every period, like ACT
    for actions, origin in chunks:
        b.add(actions, origin)
    # At tick 100: chunk 0 says its action 2, chunk 1 its action 1, chunk 2 its action 0.
    preds = np.stack([chunks[0][0][2], chunks[1][0][1], chunks[2][0][0]])
    w = np.exp(-m * np.arange(3))
    np.testing.assert_allclose(b.action(chunks[2][0], 0, 100), (w[:, None] * preds).sum(0) / w.sum())
    assert w[0] > w[2]  # ACT: the oldest prediction weighs most


def test_ensemble_keeps_a_bounded_history():
    b = ChunkBlender(BlendConfig("ensemble", ensemble_decay=0.0, max_chunks=2), PERIOD)
    for c in range(3):
        b.add(np.full((8, 1), float(c)), 50 * c)
    # Only chunks 1 and 2 remain: the plain mean of 1 and 2.
    assert b.action(np.full((8, 1), 2.0), 0, 100)[0] == pytest.approx(1.5)


def test_bad_blend_settings():
    with pytest.raises(ConfigError, match="--blend"):
        BlendConfig("median")
    with pytest.raises(ConfigError, match="new_weight"):
        BlendConfig("average", new_weight=0.0)
    assert math.isclose(BlendConfig().new_weight, 0.5)
