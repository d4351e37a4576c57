"""Parity with LeRobot's PI0 / PI05 on the shared fixtures: every stage, masks exactly, actions <= 1e-5."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hotloop.families.pi.checkpoint import load_checkpoint
from hotloop.families.pi.sampling import PiObservation, sample_actions
from hotloop.models.pi0 import (
    additive_mask,
    make_att_2d_masks,
    prefix_masks,
    sincos_time_embedding,
    suffix_masks,
)

ACTIONS_TOL = 1e-5
INTERMEDIATE_TOL = 3e-5


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a))


def _close(name: str, got: torch.Tensor, ref: np.ndarray, tol: float) -> float:
    diff = (got.detach().float() - _t(ref).float()).abs().max().item()
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {ref.shape}"
    assert diff <= tol, f"{name}: max abs diff {diff:.3g} > {tol}"
    return diff


def _exact(name: str, got: torch.Tensor, ref: np.ndarray) -> None:
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {ref.shape}"
    assert np.array_equal(got.numpy(), ref), f"{name}: not exactly equal"


@pytest.mark.parametrize("name,pi05", [("lerobot-pi0-tiny", False), ("lerobot-pi05-tiny", True)])
def test_fixture_parity(fixtures_dir: Path, name: str, pi05: bool) -> None:
    folder = fixtures_dir / name
    ck = load_checkpoint(folder)
    model, cfg = ck.model, ck.config
    assert cfg.pi05 is pi05
    assert not ck.report.missing and not ck.report.unexpected and not ck.report.mismatches
    # The fixtures name published variants but hold tiny tensors: the loader must say so.
    assert any("using the tensor sizes" in n for n in ck.report.notes)
    inp, ref = np.load(folder / "inputs.npz"), np.load(folder / "intermediates.npz")
    obs = PiObservation(
        images=_t(inp["image_0"])[:, None],
        image_masks=_t(inp["img_mask_0"])[:, None],
        lang_tokens=_t(inp["tokens"]),
        lang_masks=_t(inp["masks"]),
        state=_t(inp["state"]) if "state" in inp else None,
    )
    noise = _t(np.load(folder / "noise.npy"))
    diffs: dict[str, float] = {}
    with torch.no_grad():
        siglip = model.vision_tower(obs.images[:, 0])
        diffs["siglip"] = _close("siglip_out_view0", siglip, ref["siglip_out_view0"], INTERMEDIATE_TOL)
        tokens = model.vision(obs.images)
        diffs["img_emb"] = _close("img_emb_view0", tokens, ref["img_emb_view0"], INTERMEDIATE_TOL)
        lang = model.embed_prompt(obs.lang_tokens)
        _close("lang_emb", lang, ref["lang_emb"], INTERMEDIATE_TOL)
        _close("prefix_embs", torch.cat((tokens, lang), 1), ref["prefix_embs"], INTERMEDIATE_TOL)

        pad, allowed, positions = prefix_masks(obs.image_masks, obs.lang_masks, cfg.vision.tokens_per_view)
        _exact("prefix_pad_masks", pad, ref["prefix_pad_masks"])
        _exact("prefix_att_2d_masks", allowed, ref["prefix_att_2d_masks"])
        _exact("prefix_attn_mask_4d", additive_mask(allowed), ref["prefix_attn_mask_4d"])
        _exact("prefix_position_ids", positions, ref["prefix_position_ids"])
        assert not ref["prefix_att_masks"].any()

        cache = model.prefix(tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks)
        valid = _t(ref["prefix_pad_masks"])[:, None, :, None]
        for layer in range(cfg.vlm.depth):
            for kind, stored in (("k", cache.k), ("v", cache.v)):
                key = f"kv_cache_{kind}_layer{layer}"
                got = torch.where(valid, stored[layer], 0.0)
                diffs[key] = _close(
                    key,
                    got,
                    np.where(ref["prefix_pad_masks"][:, None, :, None], ref[key], 0.0),
                    INTERMEDIATE_TOL,
                )

        s_allowed, s_positions = suffix_masks(cfg, pad)
        _exact("suffix_att_2d_masks", s_allowed, ref["suffix_att_2d_masks"])
        _exact("suffix_attn_mask_4d", cache.suffix_mask, ref["suffix_attn_mask_4d"])
        _exact("suffix_position_ids", s_positions, ref["suffix_position_ids"])
        _exact("suffix_position_ids (cache)", cache.suffix_positions, ref["suffix_position_ids"])
        # The stored block flags reproduce the stored permission through the same rule.
        s_pad = _t(ref["suffix_pad_masks"])
        own = make_att_2d_masks(s_pad, _t(ref["suffix_att_masks"]).bool())
        _exact("suffix own block", own, ref["suffix_att_2d_masks"][:, :, -cfg.suffix_len :])

        t1 = torch.ones(2)
        _close(
            "time_sincos",
            sincos_time_embedding(t1, cfg.expert.width, cfg.min_period, cfg.max_period),
            ref["time_sincos_first_step"],
            INTERMEDIATE_TOL,
        )
        _close("action_emb", model.action_in_proj(noise), ref["action_emb_first_step"], INTERMEDIATE_TOL)
        suffix, cond = model.embed_suffix(noise, torch.tensor(1.0), obs.state)
        _close("suffix_embs", suffix, ref["suffix_embs_first_step"], INTERMEDIATE_TOL)
        if pi05:
            assert cond is not None
            _close("adarms_cond", cond, ref["adarms_cond_first_step"], INTERMEDIATE_TOL)
        else:
            _close("state_emb", model.state_proj(obs.state), ref["state_emb"], INTERMEDIATE_TOL)
            temb = _t(ref["time_sincos_first_step"])[:, None].expand(-1, cfg.chunk_size, -1)
            concat = torch.cat((model.action_in_proj(noise), temb), dim=2)
            _close("action_time_concat", concat, ref["action_time_concat_first_step"], INTERMEDIATE_TOL)
        expert_out = model.expert_forward(cache, suffix, cond)[:, -cfg.chunk_size :]
        diffs["expert_out"] = _close("expert_out", expert_out, ref["expert_out_first_step"], INTERMEDIATE_TOL)

        # The Euler loop step by step, through the public denoise_step.
        x = noise
        dt = torch.tensor(-1.0 / cfg.num_steps, dtype=torch.float32)
        for k in range(cfg.num_steps):
            t = torch.tensor(1.0 + k * (-1.0 / cfg.num_steps), dtype=torch.float32)
            _exact(f"timestep {k}", t, ref["timesteps"][k])
            v = model.denoise_step(cache, x, t, obs.state)
            _close(f"v_t step {k}", v, ref["v_t_all_steps"][k], ACTIONS_TOL)
            x = x + dt * v
            _close(f"x_t after step {k}", x, ref["x_t_trajectory"][k + 1], ACTIONS_TOL)

        actions = sample_actions(model, obs, noise=noise)
        diffs["actions"] = _close("actions", actions, np.load(folder / "actions.npy"), ACTIONS_TOL)
        # The static-cache path gives the same result.
        static = sample_actions(model, obs, noise=noise, cache=model.allocate_cache(batch=2))
        assert torch.equal(static, actions)
    print(name, {k: f"{v:.2g}" for k, v in diffs.items()})
