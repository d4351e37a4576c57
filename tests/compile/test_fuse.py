"""Folded and fused sub-engines compute what the model does (float32, tight tolerance)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from hotloop.families.pi.engines import PiEngineShape, PiPipeline, build_pi_subengines
from hotloop.families.pi.fuse import drop_unused_query, fold_norms, fold_pi0_time, fuse_projections
from hotloop.families.pi.recipes import fast_pi_subengines
from hotloop.families.pi.sampling import sample_actions

TinyFactory = Callable[..., Any]


def _randomize_norms(model: torch.nn.Module) -> None:
    """Random init leaves RMSNorm weights at 0 (factor 1): give them values so folding is exercised."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name and name.endswith("weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


@pytest.mark.parametrize("name", ["pi05:tiny", "pi0:tiny"])
def test_each_transform_keeps_every_subengine_output(tiny: TinyFactory, name: str) -> None:
    cfg, model, _, _ = tiny(name)
    _randomize_norms(model)
    shape = PiEngineShape.of(cfg, batch=2)
    base = build_pi_subengines(model, shape, torch.float32)
    variants = {
        "fold": fold_norms(base),
        "fuse": fuse_projections(base),
        "both": fuse_projections(fold_norms(base)),
        "kv only": drop_unused_query(base),
        "kv only, then folded": fold_norms(drop_unused_query(base)),
    }
    if not cfg.pi05:
        variants["time"] = fold_pi0_time(base)
    for label, engines in variants.items():
        assert set(engines) == set(base)
        for n in ("vision", "prefix", "denoise_step", "denoise_loop"):
            want = base[n].module(*base[n].example_inputs)
            got = engines[n].module(*engines[n].example_inputs)
            for w, g in zip(
                want if isinstance(want, tuple) else (want,),
                got if isinstance(got, tuple) else (got,),
                strict=True,
            ):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=f"{label}/{n}")
    # The originals are untouched: same structure and still bitwise the model's.
    assert len(base["prefix"].module.blocks[0].qkv) == 3
    assert base["prefix"].module.blocks[0].attn_norm.factor is not None


@pytest.mark.parametrize("name", ["pi05:tiny", "pi0:tiny"])
@pytest.mark.parametrize("loop", [False, True])
def test_fast_pipeline_matches_sample_actions(tiny: TinyFactory, name: str, loop: bool) -> None:
    cfg, model, obs, noise = tiny(name)
    _randomize_norms(model)
    shape = PiEngineShape.of(cfg, batch=2)
    engines = fast_pi_subengines(model, shape, torch.float32)
    block = engines["denoise_step"].module.blocks[0]
    assert len(block.qkv) == 1 and len(block.gate_up) == 1 and block.attn_norm.factor is None
    assert engines["prefix"].module.blocks[-1].kv_proj is not None
    assert len(engines["vision"].module.blocks[0].qkv) == 1
    expected = sample_actions(model, obs, noise=noise)
    actions = PiPipeline.eager(cfg, shape, engines, loop=loop).sample(obs, noise)
    torch.testing.assert_close(actions, expected, rtol=1e-5, atol=1e-5)


def test_fold_pi0_time_refuses_pi05(tiny: TinyFactory) -> None:
    cfg, model, _, _ = tiny("pi05:tiny")
    engines = build_pi_subengines(model, PiEngineShape.of(cfg), torch.float32)
    with pytest.raises(ValueError, match="pi0 engines"):
        fold_pi0_time(engines)
