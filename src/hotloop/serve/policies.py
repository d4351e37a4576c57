"""Load what `hotloop serve` serves: a named target's policy with the spec its observations must match.

A policy may declare `observation_spec` (key -> ArraySpec) itself; for the built-in families the spec is
read from the policy's own configuration here, in one table, so the models stay free of serving code.
The action spec is measured, not declared: the warm-up inference on a zero observation gives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError
from hotloop.serve.server import ServedPolicy
from hotloop.serve.spec import ArraySpec, spec_of, zero_observation


def load_served_policy(target_or_artifact: str, options: Any) -> ServedPolicy:
    """`options` is a `hotloop.targets.TargetOptions`; the policy is built, warmed up and its spec taken."""
    if Path(target_or_artifact).exists() and not (Path(target_or_artifact) / "manifest.json").is_file():
        raise ConfigError(
            f"{target_or_artifact!r} is a path but not a compiled artifact (no manifest.json): pass a "
            "target name (see `hotloop targets`) or an artifact from `hotloop compile`"
        )
    from hotloop.targets import find_target

    policy = find_target(target_or_artifact).build_policy(target_or_artifact, options)
    return serve_policy(target_or_artifact, policy)


def serve_policy(name: str, policy: Any) -> ServedPolicy:
    """Wrap any Policy: find its observation spec, run one warm-up inference, record the action spec."""
    observation_spec = observation_spec_of(policy)
    policy.reset()
    action = policy.infer(zero_observation(observation_spec))
    policy.reset()
    return ServedPolicy(name, policy, observation_spec, spec_of(action))


def observation_spec_of(policy: Any) -> dict[str, ArraySpec]:
    declared = getattr(policy, "observation_spec", None)
    if isinstance(declared, dict):
        return dict(declared)
    # The built-in families (imported only here: the policy was built, so they are loaded already).
    from hotloop.models.pi_policy import PiPolicy
    from hotloop.models.toy import ToyPolicy
    from hotloop.sim.demo_policy import DemoConveyorPolicy

    if isinstance(policy, ToyPolicy):
        return {"state": ArraySpec((policy.model.config.state_dim,), "float32")}
    if isinstance(policy, DemoConveyorPolicy):
        from hotloop.sim.tasks.gantry import STATE_DIM

        size = policy.pi.config.vision.image_size
        return {
            "images/top": ArraySpec((size, size, 3), "uint8"),
            "state": ArraySpec((STATE_DIM,), "float32"),
            # The simulator's observation carries these too; the policy ignores them, so a client may
            # forward the environment's observation unchanged.
            "prompt": ArraySpec((), "str", optional=True),
            "timestamp": ArraySpec((), "float64", optional=True),
        }
    if isinstance(policy, PiPolicy):
        cfg = policy.config
        size = cfg.vision.image_size
        # The state length the policy declares, not the model's padded width: pi0.5 writes each entry as
        # a prompt token, so a small model cannot take max_state_dim of them (pi05:tiny: 32 > 12 slots).
        return {
            "images": ArraySpec((cfg.views, size, size, 3), "uint8"),
            "state": ArraySpec((policy.spec.state_dim,), "float32"),
        }
    raise ConfigError(
        f"policy {type(policy).__name__} declares no observation_spec, so the server cannot check its "
        "inputs; give it an `observation_spec` attribute (key -> ArraySpec)"
    )
