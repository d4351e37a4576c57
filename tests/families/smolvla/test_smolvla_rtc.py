"""SmolVLA's RTC samplers: LeRobot's guided RTC reproduced (its prefix weights, guidance weight and, run here
verbatim with autograd, its correction), the prefix modes' contracts, per-token times, the checkpoint's
rtc_config, and the policy answering the RTC keys (eager, and a compiled plan's step engine)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hotloop.errors import CheckpointError, ConfigError
from hotloop.families import get_family
from hotloop.families.smolvla.observation import random_observation
from hotloop.families.smolvla.rtc import (
    RTCSettings,
    guided_sample,
    lerobot_guidance_weight,
    lerobot_prefix_weights,
    prefix_sample,
    read_rtc_settings,
    soft_prefix_sample,
)
from hotloop.families.smolvla.sampling import eager_velocity, encode, sample_actions
from hotloop.models.checkpoint_meta import Fields
from hotloop.models.smolvla import load_smolvla
from hotloop.realtime.rtc import DELAY_KEY, GUIDED_KEY, MODE_KEY, PREV_ACTIONS_KEY
from hotloop.targets import TargetOptions, find_target


def test_prefix_weights_are_lerobots_schedules() -> None:
    lin = lerobot_prefix_weights(2, 6, 10, "LINEAR")
    torch.testing.assert_close(lin, torch.tensor([1, 1, 0.8, 0.6, 0.4, 0.2, 0, 0, 0, 0]), rtol=0, atol=1e-7)
    c = torch.tensor([0.8, 0.6, 0.4, 0.2])
    exp = torch.cat([torch.ones(2), c * torch.expm1(c) / (math.e - 1), torch.zeros(4)])
    torch.testing.assert_close(lerobot_prefix_weights(2, 6, 10, "EXP"), exp, rtol=0, atol=1e-7)
    assert lerobot_prefix_weights(2, 6, 10, "ZEROS").tolist() == [1, 1] + [0] * 8
    assert lerobot_prefix_weights(2, 6, 10, "ONES").tolist() == [1] * 6 + [0] * 4
    assert lerobot_prefix_weights(8, 6, 10, "LINEAR").tolist() == [1] * 6 + [0] * 4  # d capped at the horizon


def test_guidance_weight_is_clipped_and_symmetric() -> None:
    assert float(lerobot_guidance_weight(1.0, 10.0)) == 10.0  # tau = 0: infinite, clipped
    t = 0.3
    assert math.isclose(
        float(lerobot_guidance_weight(t, 100.0)), (t * t + (1 - t) ** 2) / (t * (1 - t)), rel_tol=1e-6
    )
    assert float(lerobot_guidance_weight(0.5, 1.5)) == 1.5


def _lerobot_rtc_step(
    x_t: torch.Tensor, prev: torch.Tensor, delay: int, time: float, fn: Any, horizon: int, beta: float
) -> torch.Tensor:
    """RTCProcessor.denoise_step at 7427f318, line for line (autograd and all), LINEAR schedule."""
    tau = 1 - time
    x_t = x_t.clone().detach()
    horizon = min(horizon, prev.shape[1])
    b, chunk, dim = x_t.shape
    padded = torch.zeros(b, chunk, dim)
    padded[:, : prev.shape[1], : prev.shape[2]] = prev
    weights = lerobot_prefix_weights(delay, horizon, chunk).unsqueeze(0).unsqueeze(-1)
    with torch.enable_grad():
        v_t = fn(x_t)
        x_t.requires_grad_(True)
        x1_t = x_t - time * v_t
        err = (padded - x1_t) * weights
        correction = torch.autograd.grad(x1_t, x_t, err.clone().detach(), retain_graph=False)[0]
    max_w = torch.as_tensor(beta)
    tau_t = torch.as_tensor(tau)
    inv_r2 = ((1 - tau_t) ** 2 + tau_t**2) / (1 - tau_t) ** 2
    c = torch.nan_to_num((1 - tau_t) / tau_t, posinf=max_w)
    w = torch.minimum(torch.nan_to_num(c * inv_r2, posinf=max_w), max_w)
    return v_t - w * correction


def test_guided_sampling_is_lerobots_rtc(checkpoint: Path) -> None:
    cfg, model = load_smolvla(checkpoint)
    obs = random_observation(cfg, 1, cfg.tokenizer.max_length, 4)
    noise = torch.randn(1, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(1))
    velocity = eager_velocity(model, *encode(model, obs))
    prev = torch.randn(1, 7, cfg.action_dim, generator=torch.Generator().manual_seed(2))
    settings = RTCSettings(execution_horizon=5)
    got = guided_sample(velocity, noise, prev, 2, settings, cfg.num_steps, max_guidance_weight=8.0)
    x, dt = noise.clone(), -1.0 / cfg.num_steps
    for step in range(cfg.num_steps):
        time = 1.0 + step * dt
        t = torch.tensor(time, dtype=torch.float32).expand(1)
        x = x + dt * _lerobot_rtc_step(x, prev, 2, time, lambda xt, t=t: velocity(xt, t), 5, 8.0)
    torch.testing.assert_close(got, x, rtol=0, atol=0)
    plain = sample_actions(model, obs, noise)
    off = guided_sample(velocity, noise, prev, 2, settings, cfg.num_steps, max_guidance_weight=0.0)
    torch.testing.assert_close(off, plain, rtol=0, atol=0)  # beta 0: no guidance, plain sampling
    assert (got[:, :2, : cfg.action_dim] - prev[:, :2]).abs().mean() < (
        plain[:, :2, : cfg.action_dim] - prev[:, :2]
    ).abs().mean()


def test_prefix_modes_hold_the_given_actions(checkpoint: Path) -> None:
    cfg, model = load_smolvla(checkpoint)
    obs = random_observation(cfg, 1, cfg.tokenizer.max_length, 4)
    noise = torch.randn(1, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(1))
    k, v, pad = encode(model, obs)
    velocity = eager_velocity(model, k, v, pad)
    plain = sample_actions(model, obs, noise)
    t = torch.full((1,), 0.7)
    torch.testing.assert_close(
        velocity(noise, t[:, None].expand(1, cfg.chunk_size)), velocity(noise, t), rtol=0, atol=0
    )
    prefix = torch.randn(1, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(
        prefix_sample(velocity, noise, prefix, 0, cfg.num_steps), plain, rtol=0, atol=0
    )
    held = prefix_sample(velocity, noise, prefix, 3, cfg.num_steps)
    assert torch.equal(held[:, :3], prefix[:, :3]) and not torch.allclose(held[:, 3:], plain[:, 3:])
    none = soft_prefix_sample(velocity, noise, prefix, torch.zeros(cfg.chunk_size), cfg.num_steps)
    assert (none - plain).abs().max() < 1e-5
    w = torch.zeros(cfg.chunk_size)
    w[:2], w[2:5] = 1.0, torch.tensor([0.6, 0.3, 0.1])
    soft = soft_prefix_sample(velocity, noise, prefix, w, cfg.num_steps)
    assert torch.equal(soft[:, :2], prefix[:, :2])
    with pytest.raises(ConfigError, match="rtc weights must have shape"):
        soft_prefix_sample(velocity, noise, prefix, torch.zeros(3), cfg.num_steps)


def test_rtc_config_of_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    assert read_rtc_settings(Fields({"rtc_config": None}, path)) == RTCSettings()
    got = read_rtc_settings(Fields({"rtc_config": {"enabled": True, "prefix_attention_schedule": "EXP",
                                                   "execution_horizon": 7, "max_guidance_weight": 4}}, path))  # fmt: skip
    assert got == RTCSettings("EXP", 7, 4.0)
    with pytest.raises(CheckpointError, match="field 'rtc_config.mode' is 'trained'"):
        read_rtc_settings(Fields({"rtc_config": {"mode": "trained"}}, path))


def _raw_obs(seed: int = 0) -> dict[str, Any]:
    g = np.random.default_rng(seed)
    return {"images": {"top": g.integers(0, 255, (24, 40, 3), dtype=np.uint8),
                       "wrist": g.integers(0, 255, (24, 40, 3), dtype=np.uint8)},
            "state": g.normal(size=10).astype(np.float32), "prompt": "w5 w6 w7"}  # fmt: skip


def test_the_policy_answers_the_rtc_keys(checkpoint: Path) -> None:
    policy = find_target(str(checkpoint)).build_policy(str(checkpoint), TargetOptions())
    obs = _raw_obs()
    plain = policy.infer(obs)["actions"]
    prev = plain[3:].copy() + 0.05
    for mode in ("guided", "prefix", "soft-prefix"):
        policy.reset()
        reply = policy.infer({**obs, PREV_ACTIONS_KEY: prev, DELAY_KEY: 2, MODE_KEY: mode})
        assert reply[GUIDED_KEY] is True and reply[MODE_KEY] == mode and reply["actions"].shape == plain.shape
        if mode != "guided":
            np.testing.assert_allclose(reply["actions"][:2], prev[:2], atol=1e-5)  # executed meanwhile: held
    with pytest.raises(ConfigError, match="rtc_prev_actions has 3 action columns"):
        policy.infer({**obs, PREV_ACTIONS_KEY: prev[:, :3], DELAY_KEY: 1})


def test_the_policy_checks_a_draft(checkpoint: Path) -> None:
    """`--strategy draft` on SmolVLA: a tolerance nothing exceeds keeps the draft itself (the rows sent,
    through the normalization and back); one everything exceeds runs the full path (the check, then the
    soft-prefix loop, the executed rows held); a compiled plan checks where it runs RTC."""
    from hotloop.realtime.draft import DRAFT_KEY, TOLERANCE_KEY

    policy = find_target(str(checkpoint)).build_policy(str(checkpoint), TargetOptions())
    assert policy.supports_draft
    obs = _raw_obs()
    plain = policy.infer(obs)["actions"]
    prev = plain[1:].copy() + 0.05
    keys = {PREV_ACTIONS_KEY: prev, DELAY_KEY: 2, MODE_KEY: "draft"}
    kept = policy.infer({**obs, **keys, TOLERANCE_KEY: 100.0})
    stats = kept[DRAFT_KEY]
    assert kept[MODE_KEY] == "draft" and stats["speculative"] and stats["evals"] == 1
    assert stats["accepted"] == len(plain) and 0 < stats["work"] < 1
    np.testing.assert_allclose(kept["actions"][: len(prev)], prev, atol=1e-4)
    np.testing.assert_allclose(kept["actions"][len(prev) :], prev[-1:], atol=1e-4)  # the padding
    full = policy.infer({**obs, **keys, TOLERANCE_KEY: 1e-9})
    stats = full[DRAFT_KEY]
    assert not stats["speculative"] and stats["accepted"] == 0 and stats["evals"] == 1 + policy.num_steps
    assert full["actions"].shape == plain.shape and stats["work"] > 1
    np.testing.assert_allclose(full["actions"][:2], prev[:2], atol=1e-5)  # executed meanwhile: held


def test_a_compiled_plan_runs_rtc_through_its_step_engine(checkpoint: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from hotloop.cli import app

    out = tmp_path / "art"
    res = CliRunner().invoke(app, ["compile", str(checkpoint), "-o", str(out), "--budget-ms", "1e5", "--backends",
                                   "eager", "--precisions", "fp32", "--iters", "1", "--warmup", "0", "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    policy = find_target(str(out)).build_policy(str(out), TargetOptions())
    pipeline = policy.engine.pipeline
    assert policy.supports_rtc == pipeline.has_step
    assert (PREV_ACTIONS_KEY in policy.observation_spec) == pipeline.has_step
    eager = find_target(str(checkpoint)).build_policy(str(checkpoint), TargetOptions())
    obs = _raw_obs(1)
    rtc = {
        **obs,
        PREV_ACTIONS_KEY: eager.infer(obs)["actions"][2:] + 0.05,
        DELAY_KEY: 1,
        MODE_KEY: "soft-prefix",
    }
    assert policy.supports_draft == pipeline.has_step
    if pipeline.has_step:
        eager.reset()
        np.testing.assert_allclose(policy.infer(rtc)["actions"], eager.infer(rtc)["actions"], atol=1e-5)
        draft = {**rtc, MODE_KEY: "draft"}
        eager.reset()
        policy.reset()
        got, want = policy.infer(draft), eager.infer(draft)
        assert got["draft"] == want["draft"]
        np.testing.assert_allclose(got["actions"], want["actions"], atol=1e-5)
    else:
        with pytest.raises(ConfigError, match="cannot take RTC guidance"):
            policy.infer(rtc)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["policy"]["checkpoint"] == str(checkpoint.resolve())
    # the pipeline's own halves, whatever the plan: encode + velocity on the step engine equal the model's
    cfg, model = load_smolvla(checkpoint)
    family = get_family("smolvla")
    shape = family.default_shape(cfg)
    engines = family.build_subengines(model, shape, torch.float32)
    step_pipe = family.eager_pipeline(cfg, shape, engines)
    o = random_observation(cfg, 1, shape.prompt_slots, 3)
    x = torch.randn(1, cfg.chunk_size, cfg.max_action_dim)
    t = torch.linspace(0.2, 0.9, cfg.chunk_size)[None]
    want = eager_velocity(model, *encode(model, o))(x, t)
    torch.testing.assert_close(step_pipe.velocity(step_pipe.encode(o), x, t), want, rtol=0, atol=1e-6)
