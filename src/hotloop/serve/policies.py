"""Load what `hotloop serve` serves: a named target's policy with the spec its observations must match.

Every servable policy declares `observation_spec` (key -> `hotloop.policy_spec.ArraySpec`) from its own
configuration; the server checks each observation against it.
The action spec is measured, not declared: the warm-up inference on a zero observation gives it.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError
from hotloop.serve.server import ServedPolicy
from hotloop.serve.spec import ArraySpec, spec_of, zero_observation


def load_served_policy(target_or_artifact: str, options: Any) -> ServedPolicy:
    """`options` is a `hotloop.targets.TargetOptions`; the policy is built, warmed up and its spec taken."""
    if Path(target_or_artifact).is_file():
        raise ConfigError(
            f"{target_or_artifact!r} is a file: pass a target name (see `hotloop targets`), an artifact "
            "folder from `hotloop compile`, or a LeRobot checkpoint folder"
        )
    from hotloop.targets import find_target

    started = time.perf_counter()
    policy = find_target(target_or_artifact).build_policy(target_or_artifact, options)
    served = serve_policy(target_or_artifact, policy)
    return dataclasses.replace(served, load_s=time.perf_counter() - started)


def serve_policy(name: str, policy: Any) -> ServedPolicy:
    """Wrap any Policy: find its observation spec, run one warm-up inference, record the action spec."""
    observation_spec = observation_spec_of(policy, name)
    policy.reset()
    action = policy.infer(zero_observation(observation_spec))
    policy.reset()
    defaults = dict(getattr(policy, "strategy_defaults", None) or {})
    return ServedPolicy(name, policy, observation_spec, spec_of(action), defaults)


def observation_spec_of(policy: Any, name: str | None = None) -> dict[str, ArraySpec]:
    declared = getattr(policy, "observation_spec", None)
    if isinstance(declared, dict):
        return dict(declared)
    what = name or type(policy).__name__
    raise ConfigError(
        f"{what} cannot be served: it does not say what observation it reads, so the server could not "
        "check what robots send; serve a model target (see `hotloop targets`), a compiled artifact or a "
        f"checkpoint folder (to make {type(policy).__name__} servable, give it an `observation_spec`: "
        "key -> ArraySpec)"
    )
