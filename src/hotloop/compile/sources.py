"""What `hotloop compile TARGET` compiles: a pi target, the shipped demo policy, or an ONNX file.

Each pi source carries one real observation and the noise the final actions are compared under, and the
`policy` description an artifact needs to drive a robot after loading (norm stats, horizon, prompt ids).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.families.pi.engines import PiEngineShape
from hotloop.compile.pi_plan import PiSource
from hotloop.errors import ConfigError
from hotloop.models.configs import GemmaConfig, PiConfig, VisionConfig
from hotloop.families.pi.policy import NormStats, Stats

PI_FAMILIES = ("pi0", "pi05")


def norm_stats_to_dict(ns: NormStats | None) -> dict[str, Any] | None:
    if ns is None:
        return None

    def stats(s: Stats | None) -> dict[str, Any] | None:
        if s is None:
            return None
        return {k: (None if v is None else np.asarray(v).tolist()) for k, v in asdict(s).items()}

    return {"mode": ns.mode, "state": stats(ns.state), "actions": stats(ns.actions)}


def norm_stats_from_dict(d: dict[str, Any] | None) -> NormStats | None:
    if d is None:
        return None

    def stats(s: dict[str, Any] | None) -> Stats | None:
        if s is None:
            return None
        return Stats(**{k: (None if v is None else np.asarray(v, dtype=np.float32)) for k, v in s.items()})

    return NormStats(state=stats(d.get("state")), actions=stats(d.get("actions")), mode=d["mode"])


def config_from_dict(d: dict[str, Any]) -> PiConfig:
    return PiConfig(
        **{
            **d,
            "vision": VisionConfig(**d["vision"]),
            "vlm": GemmaConfig(**d["vlm"]),
            "expert": GemmaConfig(**d["expert"]),
        }
    )


def pi_source(target: str, options: Any) -> PiSource:
    """A seeded random-weight pi target (pi0:tiny, pi05:small...) or demo:conveyor."""
    if target.startswith("demo:"):
        return demo_source(target, options)
    from hotloop.families.pi.targets import build_model, random_observation, resolve_config
    from hotloop.families.pi.sampling import make_noise

    cfg = resolve_config(target, options)
    model = build_model(cfg, torch.float32, "cpu", options.seed)
    obs = random_observation(cfg, 1, "cpu", options.seed)
    noise = make_noise(model, 1, torch.Generator().manual_seed(options.seed + 2))
    from hotloop.families.pi.policy import NormStats, pi_policy_spec

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
        # What the policy consumes, read by the task adapter (hotloop.sim.adapter) when it is evaluated.
        "spec": pi_policy_spec(
            cfg, NormStats(mode="identity"), action_dim, cfg.chunk_size, prompt_tokens, prompt=False
        ).to_dict(),
    }
    return PiSource(target, model, PiEngineShape.of(cfg), obs, noise, policy)


def demo_source(target: str, options: Any) -> PiSource:
    from hotloop.sim.vision_demo import make_demo_task
    from hotloop.targets import default_targets

    # Through the registry: each demo target has its own adapter (demo:conveyor-vision drops the box).
    demo = default_targets().get(target).build_policy(target, options)
    pi = demo.pi
    env = make_demo_task(demo.meta)  # rendering the views the policy reads (the wrist camera too)
    raw, _ = env.reset(seed=options.seed)
    obs = pi.observation(demo.model_inputs(raw))
    env.close()
    cfg = pi.config
    steps = pi.num_steps or cfg.num_steps
    if demo.zero_noise:
        noise = torch.zeros(1, cfg.chunk_size, cfg.max_action_dim)
    else:
        noise = torch.randn(
            1, cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(options.seed)
        )
    shape = PiEngineShape(batch=1, views=cfg.views, prompt_slots=cfg.max_token_len, num_steps=steps)
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
    return PiSource(target, pi.model.float().eval(), shape, obs, noise, policy)


DEMO_TARGETS = ("demo:conveyor", "demo:conveyor-vision")


def is_onnx_target(target: str) -> bool:
    return target.endswith(".onnx")


def check_pi_target(target: str) -> None:
    family = target.split(":", 1)[0]
    if ":" not in target or (family not in PI_FAMILIES and target not in DEMO_TARGETS):
        raise ConfigError(
            f"cannot compile target {target!r}: use a pi target (pi05:small, pi0:tiny...), "
            f"{', '.join(DEMO_TARGETS)}, "
            "or a path to an .onnx file with --input NAME:SHAPE"
        )


def onnx_path(target: str) -> Path:
    path = Path(target)
    if not path.is_file():
        raise ConfigError(f"ONNX file {target} does not exist")
    return path
