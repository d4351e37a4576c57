"""A loaded engine behind the `Policy` protocol, so `hotloop eval ART` drives the simulator with it.

`EnginePiPolicy` is `PiPolicy` (same preprocessing, same noise stream, same unnormalisation) with the
sampling done by the compiled engine; `demo:conveyor` artifacts add the demo's state and action transforms.
"""

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


def engine_policy(engine: Any, seed: int = 0) -> Any:
    """The artifact's policy: a plain `EnginePiPolicy`, or the demo adapter around one."""
    from hotloop.compile.sources import norm_stats_from_dict
    from hotloop.errors import ConfigError

    info = engine.manifest.get("policy") or {}
    if engine.kind != "pi" or not info:
        raise ConfigError(
            f"artifact {engine.path} is not a policy (kind {engine.kind}); it can be benched only"
        )
    pi = EnginePiPolicy(
        engine,
        zero_noise=bool(info.get("zero_noise", False)),
        norm_stats=norm_stats_from_dict(info.get("norm_stats")),
        action_dim=info.get("action_dim"),
        horizon=info.get("horizon"),
        default_prompt_tokens=list(info.get("default_prompt_tokens") or []),
        seed=seed,
    )
    policy: Any = pi
    if info.get("kind") == "demo:conveyor":
        from hotloop.sim.demo_policy import DemoConveyorPolicy

        # zero noise is handled by EnginePiPolicy, so the adapter takes its plain path.
        policy = DemoConveyorPolicy(pi, dict(info.get("meta") or {}), zero_noise=False)
    elif info.get("kind") == "demo:conveyor-vision":
        from hotloop.sim.vision_demo import VisionConveyorPolicy

        policy = VisionConveyorPolicy(pi, dict(info.get("meta") or {}), zero_noise=False)
    check_stored_spec(engine, policy)
    return policy


def check_stored_spec(engine: Any, policy: Any) -> None:
    """The spec the artifact stored (what the compiled policy consumes, read by the task adapter) must be
    the one the rebuilt policy has: a mismatch means the artifact and this hotloop disagree on the
    policy's inputs, and is refused by name instead of feeding it the wrong observation."""
    from hotloop.errors import CheckpointError, ConfigError
    from hotloop.policy_spec import PolicySpec

    stored = (engine.manifest.get("policy") or {}).get("spec")
    if stored is None:  # an artifact from before specs were stored: the rebuilt policy's spec holds
        return
    where = engine.path / "manifest.json"
    try:
        want = PolicySpec.from_dict(stored)
    except ConfigError as e:
        raise CheckpointError(f"{where}: malformed policy spec: {e}") from None
    if policy.spec != want:
        raise CheckpointError(
            f"{where}: the stored policy spec {want.to_dict()} differs from the policy this hotloop "
            f"rebuilds from the artifact ({policy.spec.to_dict()}); recompile it with this version"
        )
