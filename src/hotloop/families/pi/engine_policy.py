"""A loaded pi artifact behind the `Policy` protocol: `EnginePiPolicy` is `PiPolicy` (same preprocessing,
same noise stream, same unnormalisation) with the sampling done by the compiled engine."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hotloop.families.pi.policy import PiPolicy


class EnginePiPolicy(PiPolicy):
    # The engine runs the compiled plain sampler only. RTC keys are ignored (the answer has no
    # `rtc_guided`, and the scheduler stops with a configuration error) rather than served by the eager
    # model behind the engine, which would be a silent fall back to the slow path.
    supports_rtc = False
    # Nor a draft check: the compiled plan's time conditioning is a table of its own grid's steps, with no
    # velocity at an arbitrary flow time (`--strategy draft` is refused before any episode).
    supports_draft = False

    def __init__(self, engine: Any, zero_noise: bool = False, **kwargs: Any) -> None:
        super().__init__(engine.model, engine.cfg, **kwargs)
        self.engine = engine
        self.zero_noise = zero_noise

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        model_obs = self.observation(obs)
        cfg = self.config
        shape = (1, cfg.chunk_size, cfg.max_action_dim)
        # Drawn exactly like `sample_actions` draws it, so seeds give the reference's noise.
        noise = torch.zeros(shape) if self.zero_noise else torch.randn(shape, generator=self._generator)
        chunk = self.engine.infer(model_obs, noise)
        actions = chunk[0, : self.horizon, : self.action_dim].cpu().numpy().copy()
        return {"actions": self.norm_stats.unnormalize(actions, "actions").astype(np.float32)}


def engine_policy(engine: Any, info: dict[str, Any], seed: int = 0) -> EnginePiPolicy:
    """The artifact's policy (a target that wraps its policy, such as a demo, wraps this one: see
    `hotloop.targets.TargetEntry.wrap`)."""
    from hotloop.families.pi.config_io import norm_stats_from_dict

    pi = EnginePiPolicy(
        engine,
        zero_noise=bool(info.get("zero_noise", False)),
        norm_stats=norm_stats_from_dict(info.get("norm_stats")),
        action_dim=info.get("action_dim"),
        horizon=info.get("horizon"),
        default_prompt_tokens=list(info.get("default_prompt_tokens") or []),
        seed=seed,
    )
    return pi
