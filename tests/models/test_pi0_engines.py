"""Sub-engine composition, mask semantics, determinism and the training loss on tiny random models."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hotloop.families.pi.sampling import PiObservation, flow_matching_loss, sample_actions
from hotloop.models.configs import PiConfig, get_pi_config
from hotloop.models.gemma import attend, rope_cos_sin
from hotloop.models.pi0 import (
    PiModel,
    additive_mask,
    discretize_state,
    init_weights,
    make_att_2d_masks,
    prefix_masks,
    state_prompt_tokens,
    suffix_block_starts,
    suffix_masks,
)


def tiny(pi05: bool, views: int = 2) -> tuple[PiModel, PiConfig]:
    cfg = replace(get_pi_config("pi05:tiny" if pi05 else "pi0:tiny"), views=views)
    model = init_weights(PiModel(cfg), torch.Generator().manual_seed(3))
    # Non-zero norm weights / biases so every parameter matters in the comparisons below.
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return model.eval(), cfg


def observation(cfg: PiConfig, batch: int = 2, seed: int = 0) -> PiObservation:
    g = torch.Generator().manual_seed(seed)
    size = cfg.vision.image_size
    lang_masks = torch.ones(batch, cfg.max_token_len, dtype=torch.bool)
    lang_masks[1, cfg.max_token_len // 2 :] = False  # sample 1: half the prompt is padding
    image_masks = torch.ones(batch, cfg.views, dtype=torch.bool)
    image_masks[1, -1] = False  # sample 1: last view absent
    return PiObservation(
        images=torch.rand(batch, cfg.views, 3, size, size, generator=g) * 2 - 1,
        image_masks=image_masks,
        lang_tokens=torch.randint(3, cfg.vocab_size, (batch, cfg.max_token_len), generator=g) * lang_masks,
        lang_masks=lang_masks,
        state=torch.randn(batch, cfg.max_state_dim, generator=g),
    )


def monolithic_velocity(
    model: PiModel, obs: PiObservation, x_t: torch.Tensor, t: torch.Tensor
) -> torch.Tensor:
    """Reference: prefix and suffix through both stacks jointly in one pass (LeRobot's training forward),
    one attention over the concatenated sequence per layer, no cache."""
    cfg = model.cfg
    prefix = torch.cat((model.vision(obs.images), model.embed_prompt(obs.lang_tokens)), dim=1)
    suffix, cond = model.embed_suffix(x_t, t, obs.state)
    p_pad, _, _ = prefix_masks(obs.image_masks, obs.lang_masks, cfg.vision.tokens_per_view)
    b, p, s = prefix.shape[0], prefix.shape[1], suffix.shape[1]
    pad = torch.cat((p_pad, torch.ones(b, s, dtype=torch.bool)), dim=1)
    blocks = torch.cat((torch.zeros(b, p, dtype=torch.bool), suffix_block_starts(cfg, b)), dim=1)
    mask = additive_mask(make_att_2d_masks(pad, blocks))
    positions = torch.cumsum(pad.long(), dim=1) - 1
    cos, sin = rope_cos_sin(positions, cfg.vlm.head_dim, cfg.vlm.rope_base, torch.float32)
    xs = [prefix, suffix]
    for vl, el in zip(model.vlm.layers, model.expert.layers, strict=True):
        qs, ks, vs, gates = [], [], [], []
        for x, layer, c, (lo, hi) in ((xs[0], vl, None, (0, p)), (xs[1], el, cond, (p, p + s))):
            h, gate = layer.input_layernorm(x, c)
            q, k, v = layer.self_attn.qkv(h, cos[:, lo:hi], sin[:, lo:hi])
            qs.append(q), ks.append(k), vs.append(v), gates.append(gate)
        out = attend(torch.cat(qs, 2), torch.cat(ks, 2), torch.cat(vs, 2), mask, cfg.vlm.head_dim**-0.5)
        outs = (out[:, :p], out[:, p:])
        new = []
        for x, layer, c, o, gate in (
            (xs[0], vl, None, outs[0], gates[0]),
            (xs[1], el, cond, outs[1], gates[1]),
        ):
            y = layer.self_attn.o_proj(o)
            x = x + y if gate is None else x + y * gate
            h, gate2 = layer.post_attention_layernorm(x, c)
            y = layer.mlp(h)
            new.append(x + y if gate2 is None else x + y * gate2)
        xs = new
    out, _ = model.expert.norm(xs[1], cond)
    return model.action_out_proj(out[:, -cfg.chunk_size :])


@pytest.mark.parametrize("pi05", [False, True])
def test_sub_engines_equal_monolithic_forward(pi05: bool) -> None:
    model, cfg = tiny(pi05)
    obs = observation(cfg)
    noise = torch.randn(2, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)
        for t in (1.0, 0.55, 0.1):
            split = model.denoise_step(cache, noise, torch.tensor(t), obs.state)
            joint = monolithic_velocity(model, obs, noise, torch.tensor(t))
            assert (split - joint).abs().max().item() < 1e-5
        # Whole-sampler composition against an Euler loop over the monolithic forward.
        actions = sample_actions(model, obs, noise=noise, num_steps=4)
        x = noise
        for k in range(4):
            x = x + torch.tensor(-0.25) * monolithic_velocity(model, obs, x, torch.tensor(1.0 - 0.25 * k))
        assert (actions - x).abs().max().item() < 1e-5


def test_padding_never_reaches_actions() -> None:
    """Changing padded prompt ids or an absent view's pixels must not change the actions."""
    model, cfg = tiny(pi05=True)
    obs = observation(cfg)
    noise = torch.randn(2, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(2))
    base = sample_actions(model, obs, noise=noise, num_steps=3)
    tokens = obs.lang_tokens.clone()
    tokens[1, cfg.max_token_len // 2 :] = 7
    images = obs.images.clone()
    images[1, -1] = -1.0
    other = sample_actions(model, replace(obs, lang_tokens=tokens, images=images), noise=noise, num_steps=3)
    assert torch.allclose(base, other, atol=1e-6)
    # ...while a real token does change them.
    tokens[0, 0] = (tokens[0, 0] + 1) % cfg.vocab_size
    changed = sample_actions(model, replace(obs, lang_tokens=tokens), noise=noise, num_steps=3)
    assert (changed[0] - base[0]).abs().max() > 1e-4


def test_mask_semantics_by_hand() -> None:
    # One view of 2 tokens (absent in sample 1), 3 prompt tokens (the last is padding in sample 0).
    image_masks = torch.tensor([[True], [False]])
    lang_masks = torch.tensor([[True, True, False], [True, True, True]])
    pad, allowed, positions = prefix_masks(image_masks, lang_masks, tokens_per_view=2)
    assert pad.tolist() == [[True, True, True, True, False], [False, False, True, True, True]]
    assert positions.tolist() == [[0, 1, 2, 3, 3], [-1, -1, 0, 1, 2]]
    # Bidirectional among valid tokens, nothing to or from padding.
    assert allowed[0, 0].tolist() == [True, True, True, True, False]
    assert allowed[0, 4].tolist() == [False] * 5
    assert allowed[1, 2].tolist() == [False, False, True, True, True]
    add = additive_mask(allowed)
    assert add[0, 0, 0, 4].item() == pytest.approx(-2.3819763e38) and add[0, 0, 0, 0].item() == 0.0
    # pi0 suffix: [state | a0 a1]; the state sees the prefix and itself, actions see everything valid.
    cfg = replace(get_pi_config("pi0:tiny"), chunk_size=2)
    s_allowed, s_pos = suffix_masks(cfg, pad)
    assert s_allowed[0].tolist() == [
        [True, True, True, True, False, True, False, False],
        [True, True, True, True, False, True, True, True],
        [True, True, True, True, False, True, True, True],
    ]
    assert s_pos.tolist() == [[4, 5, 6], [3, 4, 5]]  # starts at the count of valid prefix tokens
    # pi0.5: one action block, no state token.
    s05, _ = suffix_masks(replace(cfg, pi05=True), pad)
    assert s05.shape == (2, 2, 7) and bool(s05[:, :, -2:].all())
    # Causal blocks: flags [1, 0, 1] -> token 0,1 form a block, token 2 sees all.
    causal = make_att_2d_masks(torch.ones(1, 3, dtype=torch.bool), torch.tensor([[1, 0, 1]]))
    assert causal[0].tolist() == [[True, True, False], [True, True, False], [True, True, True]]


@pytest.mark.parametrize("pi05", [False, True])
def test_fixed_noise_is_deterministic(pi05: bool) -> None:
    model, cfg = tiny(pi05, views=1)
    obs = observation(cfg)
    a = sample_actions(model, obs, generator=torch.Generator().manual_seed(5))
    b = sample_actions(model, obs, generator=torch.Generator().manual_seed(5))
    c = sample_actions(model, obs, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(sample_actions(model, obs), sample_actions(model, obs))  # default: seeded noise
    cache = model.allocate_cache(batch=2)
    assert torch.equal(sample_actions(model, obs, cache=cache), sample_actions(model, obs))


def test_discretize_state_and_prompt_ids() -> None:
    bins = discretize_state(np.array([-1.0, -0.999, 0.0, 0.999, 1.0, 5.0, -5.0]))
    assert bins.tolist() == [0, 0, 128, 255, 255, 255, 0]
    cfg = get_pi_config("pi05:nano")
    tokens, mask = state_prompt_tokens([5, 6], np.array([0.0, 1.0]), cfg)
    assert tokens[:4].tolist() == [5, 6, cfg.vocab_size - 256 + 128, cfg.vocab_size - 1]
    assert mask.tolist() == [True] * 4 + [False] * (cfg.max_token_len - 4)
    with pytest.raises(ValueError, match="task token ids"):
        state_prompt_tokens([cfg.vocab_size - 1], np.zeros(2), cfg)


@pytest.mark.parametrize("pi05", [False, True])
def test_flow_matching_loss_matches_definition_and_trains(pi05: bool) -> None:
    model, cfg = tiny(pi05, views=1)
    obs = observation(cfg, batch=4)
    g = torch.Generator().manual_seed(0)
    actions = torch.randn(4, cfg.chunk_size, cfg.max_action_dim, generator=g)
    noise = torch.randn(actions.shape, generator=g)
    time = torch.tensor([0.9, 0.5, 0.2, 0.05])
    loss = flow_matching_loss(model, obs, actions, noise=noise, time=time)
    with torch.no_grad():
        x_t = time[:, None, None] * noise + (1 - time[:, None, None]) * actions
        cache = model.prefix(model.vision(obs.images), obs.image_masks, obs.lang_tokens, obs.lang_masks)
        v = torch.stack(
            [
                model.denoise_step(cache, x_t[i : i + 1].expand(4, -1, -1), time[i], obs.state)[i]
                for i in range(4)
            ]
        )
    assert loss.item() == pytest.approx(F.mse_loss(v, noise - actions).item(), rel=1e-5)
    loss.backward()
    last = f"vlm.layers.{cfg.vlm.depth - 1}."
    # The VLM's last layer reaches the actions only through its keys/values; its final norm not at all.
    unused = (
        "vlm.norm",
        last + "self_attn.q_proj",
        last + "self_attn.o_proj",
        last + "mlp",
        last + "post_att",
    )
    for name, p in model.named_parameters():
        if name.startswith(unused):
            assert p.grad is None, f"{name} should not be used"
            continue
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"
    # A few optimiser steps on one batch reduce the loss.
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(15):
        opt.zero_grad()
        loss = flow_matching_loss(model, obs, actions, generator=torch.Generator().manual_seed(step % 3))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3])
