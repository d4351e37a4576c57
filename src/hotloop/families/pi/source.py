"""pi targets as compile sources: seeded random weights, one random observation, the compared noise."""

from __future__ import annotations

from typing import Any

import torch

from hotloop.families.pi.engines import PiEngineShape
from hotloop.families.pi.targets import qualify
from hotloop.families.protocol import PolicySource


def _source(target: str, options: Any) -> PolicySource:
    from hotloop.families.pi.family import PiFamily
    from hotloop.families.pi.policy import NormStats, pi_policy_spec
    from hotloop.families.pi.sampling import make_noise
    from hotloop.families.pi.targets import build_model, random_observation, resolve_config

    cfg = resolve_config(target, options)
    model = build_model(cfg, torch.float32, "cpu", options.seed)
    obs = random_observation(cfg, 1, "cpu", options.seed)
    noise = make_noise(model, 1, torch.Generator().manual_seed(options.seed + 2))
    action_dim = options.action_dim or cfg.max_action_dim
    prompt_tokens = [1, 2, 3]
    policy = {
        "kind": "pi",
        "action_dim": action_dim,
        "horizon": cfg.chunk_size,
        "default_prompt_tokens": prompt_tokens,
        "norm_stats": None,
        "seed": options.seed,
        "zero_noise": False,
        # What the policy consumes, read by the task adapter (hotloop.closedloop.adapter) when it is evaluated.
        "spec": pi_policy_spec(
            cfg, NormStats(mode="identity"), action_dim, cfg.chunk_size, prompt_tokens, prompt=False
        ).to_dict(),
    }
    return PolicySource(target, PiFamily(), model, PiEngineShape.of(cfg), obs, noise, policy)


def build_pi0_source(config_name: str, options: Any) -> PolicySource:
    return _source(qualify(config_name, "pi0"), options)


def build_pi05_source(config_name: str, options: Any) -> PolicySource:
    return _source(qualify(config_name, "pi05"), options)
