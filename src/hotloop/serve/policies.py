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


def rtc_observation_spec(action_dim: int) -> dict[str, ArraySpec]:
    """The real-time chunking keys (`hotloop.realtime.rtc`) a policy that applies them accepts: the rest
    of the executing chunk (any number of rows), the delay d in control periods, the guidance clip and
    the mode. All optional: a robot sends them only while a chunk is executing, under `--strategy rtc`."""
    from hotloop.realtime.rtc import DELAY_KEY, MAX_GUIDANCE_WEIGHT_KEY, MODE_KEY, PREV_ACTIONS_KEY

    return {
        PREV_ACTIONS_KEY: ArraySpec((-1, action_dim), "float32", optional=True),
        DELAY_KEY: ArraySpec((), "int64", optional=True),
        MAX_GUIDANCE_WEIGHT_KEY: ArraySpec((), "float32", optional=True),
        MODE_KEY: ArraySpec((), "str", optional=True),
    }


def observation_spec_of(policy: Any) -> dict[str, ArraySpec]:
    declared = getattr(policy, "observation_spec", None)
    if isinstance(declared, dict):
        return dict(declared)
    # The built-in families (imported only here: the policy was built, so they are loaded already).
    from hotloop.families.pi.policy import PiPolicy
    from hotloop.models.toy import ToyPolicy
    from hotloop.sim.demo_policy import DemoConveyorPolicy

    if isinstance(policy, ToyPolicy):
        return {"state": ArraySpec((policy.model.config.state_dim,), "float32")}
    if isinstance(policy, DemoConveyorPolicy):
        from hotloop.sim.tasks.gantry import STATE_DIM

        spec = policy.spec  # every view it reads: top, and the wrist for demo:conveyor-vision
        return {
            **{f"images/{v.key}": ArraySpec((v.height, v.width, 3), "uint8") for v in spec.images},
            "state": ArraySpec((STATE_DIM,), "float32"),
            # The simulator's observation carries these too; the policy ignores them, so a client may
            # forward the environment's observation unchanged.
            "prompt": ArraySpec((), "str", optional=True),
            "timestamp": ArraySpec((), "float64", optional=True),
            **(rtc_observation_spec(spec.action_dim) if policy.pi.supports_rtc else {}),
        }
    if isinstance(policy, PiPolicy):
        cfg = policy.config
        size = cfg.vision.image_size
        # The state length the policy declares, not the model's padded width: pi0.5 writes each entry as
        # a prompt token, so a small model cannot take max_state_dim of them (pi05:tiny: 32 > 12 slots).
        return {
            "images": ArraySpec((cfg.views, size, size, 3), "uint8"),
            "state": ArraySpec((policy.spec.state_dim,), "float32"),
            # PiPolicy.infer applies them; a compiled engine (EnginePiPolicy) does not take them
            **(rtc_observation_spec(policy.spec.action_dim) if policy.supports_rtc else {}),
        }
    raise ConfigError(
        f"policy {type(policy).__name__} declares no observation_spec, so the server cannot check its "
        "inputs; give it an `observation_spec` attribute (key -> ArraySpec)"
    )
