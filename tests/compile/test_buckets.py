"""Prompt buckets: the smallest fitting bucket is chosen and the actions equal the unbucketed run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.families.buckets import choose_bucket, parse_buckets, prompt_buckets, prompt_length
from hotloop.families.pi.buckets import BucketedPiPipeline
from hotloop.families.pi.engines import PiEngineShape, PiPipeline, build_pi_subengines
from hotloop.families.pi.recipes import fast_pi_subengines
from hotloop.families.pi.sampling import sample_actions

TinyFactory = Callable[..., Any]


def test_bucket_choice() -> None:
    assert prompt_buckets(200) == (32, 64, 128, 200)
    assert prompt_buckets(12, (4, 8, 16)) == (4, 8, 12)
    assert choose_bucket((4, 8, 12), 5) == 8
    assert choose_bucket((4, 8, 12), 4) == 4
    masks = torch.zeros(2, 12, dtype=torch.bool)
    masks[0, :3] = True
    masks[1, :6] = True
    assert prompt_length(masks) == 6
    masks[0, 9] = True  # a hole: the bucket must reach the last real token
    assert prompt_length(masks) == 10
    assert prompt_length(torch.zeros(1, 12, dtype=torch.bool)) == 0
    assert parse_buckets("32, 64,128") == (32, 64, 128)
    with pytest.raises(ConfigError, match="--buckets"):
        parse_buckets("32,abc")
    with pytest.raises(ConfigError, match="--buckets"):
        prompt_buckets(200, (0, 32))


@pytest.mark.parametrize("name", ["pi05:tiny", "pi0:tiny"])
@pytest.mark.parametrize("real_tokens", [1, 4, 7, 12])
def test_bucketed_actions_equal_the_full_prompt_run(tiny: TinyFactory, name: str, real_tokens: int) -> None:
    cfg, model, obs, noise = tiny(name, real_tokens=real_tokens)
    expected = sample_actions(model, obs, noise=noise)
    engines = build_pi_subengines(model, PiEngineShape.of(cfg, batch=2), torch.float32)
    bucketed = BucketedPiPipeline.eager(cfg, engines, buckets=(2, 4, 8))
    actions = bucketed.sample(obs, noise)
    assert bucketed.last_bucket == choose_bucket((2, 4, 8, 12), real_tokens)
    torch.testing.assert_close(actions, expected, rtol=0, atol=2e-6)


def test_bucketed_fast_engines_share_weights_and_match(tiny: TinyFactory) -> None:
    cfg, model, obs, noise = tiny("pi05:tiny", real_tokens=3)
    engines = fast_pi_subengines(model, PiEngineShape.of(cfg, batch=2), torch.float32)
    bucketed = BucketedPiPipeline.eager(cfg, engines, buckets=(4,), loop=True)
    small, full = bucketed.pipelines[4], bucketed.pipelines[cfg.max_token_len]
    assert small.runners["prefix"] is full.runners["prefix"]  # one module, no weight copies
    full_actions = full.sample(obs, noise)
    torch.testing.assert_close(bucketed.sample(obs, noise), full_actions, rtol=0, atol=2e-6)
    assert bucketed.last_bucket == 4


def test_a_bucket_too_small_for_the_prompt_is_refused(tiny: TinyFactory) -> None:
    cfg, model, obs, noise = tiny("pi05:tiny", real_tokens=6)
    engines = build_pi_subengines(model, PiEngineShape(2, 1, 4, cfg.num_steps), torch.float32)
    with pytest.raises(ConfigError, match="larger prompt bucket"):
        PiPipeline.eager(cfg, PiEngineShape(2, 1, 4, cfg.num_steps), engines).sample(obs, noise)
