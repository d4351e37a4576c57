"""The shipped demo policies as compile sources: their trained weights, a real start observation of the
task they were trained on (rendered, with the views the policy reads), their noise convention and the
policy description an artifact needs to drive the robot after loading."""

from __future__ import annotations

from typing import Any

import torch

from hotloop.families.protocol import PolicySource


def demo_source(name: str, options: Any) -> PolicySource:
    """`name`: the part after "demo:" (the target table passes it so)."""
    from hotloop.demos.conveyor_vision import make_demo_task
    from hotloop.families import get_family
    from hotloop.families.pi.config_io import norm_stats_to_dict
    from hotloop.targets import default_targets

    target = name if name.startswith("demo:") else f"demo:{name}"
    # Through the registry: each demo target has its own adapter (demo:conveyor-vision drops the box).
    demo = default_targets().get(target).build_policy(target, options)
    pi = demo.pi
    family = get_family("pi")
    env = make_demo_task(demo.meta)  # rendering the views the policy reads (the wrist camera too)
    raw, _ = env.reset(seed=options.seed)
    obs = pi.observation(demo.model_inputs(raw))
    env.close()
    cfg = pi.config
    steps = pi.num_steps or cfg.num_steps
    if demo.zero_noise:
        noise = torch.zeros(1, cfg.chunk_size, cfg.max_action_dim)
    else:
        noise = family.make_noise(cfg, None, 1, torch.Generator().manual_seed(options.seed))
    shape = family.with_steps(family.default_shape(cfg), steps)
    policy = {
        "kind": target,
        "action_dim": pi.action_dim,
        "horizon": pi.horizon,
        "default_prompt_tokens": list(pi.default_prompt_tokens),
        "norm_stats": norm_stats_to_dict(pi.norm_stats),
        "seed": options.seed,
        "zero_noise": demo.zero_noise,
        "meta": demo.meta,
        "spec": demo.spec.to_dict(),
    }
    return PolicySource(target, family, pi.model.float().eval(), shape, obs, noise, policy)
