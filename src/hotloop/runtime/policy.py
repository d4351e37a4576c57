"""A loaded engine behind the `Policy` protocol, so `hotloop eval ART` (and `hotloop serve ART`) drive a
robot with it: the artifact's family builds the policy around the engine (`PolicyFamily.engine_policy`),
and the spec the artifact stored must be the one the rebuilt policy has.
"""

from __future__ import annotations

from typing import Any


def engine_policy(engine: Any, seed: int = 0) -> Any:
    """The artifact's policy, built by its family from the manifest's `policy` entry."""
    from hotloop.errors import ConfigError

    info = engine.manifest.get("policy") or {}
    if engine.family is None or not info:
        raise ConfigError(
            f"artifact {engine.path} is not a policy (kind {engine.kind}); it can be benched only"
        )
    policy = engine.family.engine_policy(engine, info, seed)
    policy = wrapped(policy, info)
    check_stored_spec(engine, policy)
    return policy


def wrapped(policy: Any, info: dict[str, Any]) -> Any:
    """`policy` inside the wrapper of the target the artifact was compiled from, when that target has
    one (a demo's state and action transforms: `TargetEntry.wrap`)."""
    from hotloop.targets import default_targets

    targets = default_targets()
    kind = info.get("kind")
    if not isinstance(kind, str) or kind not in targets:
        return policy
    return targets.get(kind).wrap_engine_policy(policy, info)


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
