"""The sub-engine interface: shapes and names, and the pipeline reproducing `sample_actions` exactly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.families.pi.engines import PiEngineShape, PiPipeline, build_pi_subengines
from hotloop.families.pi.sampling import sample_actions

TinyFactory = Callable[..., Any]


@pytest.mark.parametrize("name", ["pi05:tiny", "pi0:tiny"])
@pytest.mark.parametrize("loop", [False, True])
def test_pipeline_equals_sample_actions_bitwise(name: str, loop: bool, tiny: TinyFactory) -> None:
    cfg, model, obs, noise = tiny(name)
    shape = PiEngineShape.of(cfg, batch=2)
    engines = build_pi_subengines(model, shape, torch.float32)
    expected = sample_actions(model, obs, noise=noise)
    actions = PiPipeline.eager(cfg, shape, engines, loop=loop).sample(obs, noise)
    assert torch.equal(actions, expected)


@pytest.mark.parametrize("name", ["pi05:tiny", "pi0:tiny"])
def test_subengines_declare_consistent_inputs_and_outputs(name: str, tiny: TinyFactory) -> None:
    cfg, model, _, _ = tiny(name)
    shape = PiEngineShape(batch=1, views=1, prompt_slots=cfg.max_token_len, num_steps=3)
    engines = build_pi_subengines(model, shape, torch.float32)
    assert set(engines) == {"vision", "prefix", "denoise_step", "denoise_loop"}
    p = shape.prefix_len(cfg)
    for engine in engines.values():
        assert len(engine.example_inputs) == len(engine.input_names)
        out = engine.module(*engine.example_inputs)
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(engine.output_names)
        assert all(torch.isfinite(o).all() for o in outs)
    k = engines["prefix"].module(*engines["prefix"].example_inputs)[0]
    assert k.shape == (cfg.vlm.depth, 1, cfg.vlm.num_kv_heads, p, cfg.vlm.head_dim)
    assert engines["denoise_loop"].constants["time_table"].shape[0] == 3
    assert ("state" in engines["denoise_step"].input_names) == (not cfg.pi05)


def test_bf16_engines_follow_the_bf16_model(tiny: TinyFactory) -> None:
    cfg, model, obs, noise = tiny("pi05:tiny")
    shape = PiEngineShape.of(cfg, batch=2)
    engines = build_pi_subengines(model, shape, torch.bfloat16)
    assert model.dtype == torch.float32  # the caller's model is left as it was
    reference = sample_actions(model.to(torch.bfloat16), obs, noise=noise)
    actions = PiPipeline.eager(cfg, shape, engines).sample(obs, noise)
    torch.testing.assert_close(actions, reference, rtol=0, atol=1e-6)


def test_pipeline_rejects_observations_that_do_not_fit(tiny: TinyFactory) -> None:
    cfg, model, obs, noise = tiny("pi05:tiny")
    shape = PiEngineShape(batch=2, views=1, prompt_slots=3, num_steps=cfg.num_steps)
    pipeline = PiPipeline.eager(cfg, shape, build_pi_subengines(model, shape, torch.float32))
    with pytest.raises(ConfigError, match="beyond the engine.s 3 prompt slots"):
        pipeline.sample(obs, noise)
    obs.lang_masks[:, 3:] = False
    with pytest.raises(ConfigError, match="noise has shape"):
        pipeline.sample(obs, noise[:1])
    with pytest.raises(ConfigError, match="prompt_slots"):
        PiEngineShape(batch=1, views=1, prompt_slots=0, num_steps=1)
