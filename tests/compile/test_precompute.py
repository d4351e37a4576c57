"""The precomputed tables equal what the model computes on line, bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
import torch

from hotloop.families.pi.blocks import MOD_GATE, MOD_SCALE, MOD_SHIFT
from hotloop.families.pi.precompute import observation_tables, step_times, time_table
from hotloop.models.gemma import AdaRMSNorm, rope_cos_sin

TinyFactory = Callable[..., Any]


def test_step_times_match_the_sampler() -> None:
    assert step_times(4) == [1.0, 0.75, 0.5, 0.25]
    assert all(isinstance(t, float) for t in step_times(10))


@pytest.mark.parametrize("batch", [1, 3])
def test_pi05_time_table_equals_online_adarms(tiny: TinyFactory, batch: int) -> None:
    cfg, model, _, _ = tiny("pi05:tiny")
    table = time_table(model, 5, batch)
    depth = cfg.expert.depth
    assert table.shape == (5, 2 * depth + 1, 3, cfg.expert.width)
    x_t = torch.zeros(batch, cfg.chunk_size, cfg.max_action_dim)
    for k, t in enumerate(step_times(5)):
        _, cond = model.embed_suffix(x_t, torch.tensor(t), None)
        norms = [
            n
            for layer in model.expert.layers
            for n in (layer.input_layernorm, layer.post_attention_layernorm)
        ]
        for j, norm in enumerate([*norms, model.expert.norm]):
            scale, shift, gate = cast(AdaRMSNorm, norm).dense(cond).unsqueeze(1).chunk(3, dim=-1)
            assert torch.equal(table[k, j, MOD_SCALE], (1.0 + scale.float())[0, 0])
            assert torch.equal(table[k, j, MOD_SHIFT], shift.float()[0, 0])
            assert torch.equal(table[k, j, MOD_GATE], gate.float()[0, 0])


def test_pi0_time_table_is_the_time_embedding(tiny: TinyFactory) -> None:
    from hotloop.models.pi0 import sincos_time_embedding

    cfg, model, _, _ = tiny("pi0:tiny")
    table = time_table(model, 3)
    for k, t in enumerate(step_times(3)):
        online = sincos_time_embedding(torch.tensor([t]), cfg.expert.width, cfg.min_period, cfg.max_period)
        assert torch.equal(table[k], online[0])


@pytest.mark.parametrize("name", ["pi05:tiny", "pi0:tiny"])
def test_observation_tables_equal_the_prefix_cache_and_rope(tiny: TinyFactory, name: str) -> None:
    cfg, model, obs, _ = tiny(name, real_tokens=5)
    obs.image_masks[1, 0] = False  # a missing view shifts positions: the tables must follow
    tables = observation_tables(cfg, obs.image_masks, obs.lang_masks)
    cache = model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)
    assert torch.equal(tables["suffix_mask"], cache.suffix_mask)
    cos, sin = rope_cos_sin(cache.suffix_positions, cfg.expert.head_dim, cfg.expert.rope_base, torch.float32)
    assert torch.equal(tables["suffix_cos"], cos) and torch.equal(tables["suffix_sin"], sin)
    valid = tables["prefix_mask"] == 0
    assert valid.shape == (2, 1, cfg.prefix_len, cfg.prefix_len)
    assert torch.equal(valid[:, 0].any(dim=1), cache.pad_mask)  # a key is usable iff it is valid
    assert not valid[1, 0, :, : cfg.vision.tokens_per_view].any()  # the missing view is masked
