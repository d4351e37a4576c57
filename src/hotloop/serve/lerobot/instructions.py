"""`SendPolicyInstructions` checked against what this server serves; the server never loads what a
client names.

LeRobot's server loads whatever `pretrained_name_or_path` and `policy_type` a client sends (any Hub repo,
any path on the server). Here the policy is fixed when the server starts, and a client's instructions
must agree with it:

- `policy_type`: the served checkpoint's own LeRobot type (`act`, `diffusion`, `smolvla`, ... from its
  `config.json`) or `hotloop`;
- `pretrained_name_or_path`: the served target as given to `hotloop serve`, its absolute path, or the
  folder's name;
- `actions_per_chunk`: 1 to the policy's chunk length (LeRobot's server quietly sends fewer);
- `lerobot_features`: the robot's motors and cameras fit the policy's inputs (`features.map_features`).

A mismatch is `Mismatch` naming the field and the fix; it goes back to the client as a gRPC status.
`device` is the client's wish for the server's device; the server runs on its own `--device` and logs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.serve.lerobot.features import FeatureMap, Mismatch, map_features
from hotloop.serve.lerobot.standins import RemotePolicyConfig
from hotloop.serve.server import ServedPolicy

HOTLOOP_TYPE = "hotloop"


@dataclass(frozen=True)
class ServedTarget:
    """What a client's instructions are checked against."""

    name: str  # the target as given to `hotloop serve`
    names: frozenset[str]  # every spelling of it a client may send
    policy_type: str | None  # the checkpoint's LeRobot type, when it has one
    horizon: int  # actions per chunk the policy answers
    served: ServedPolicy

    @property
    def accepted_types(self) -> tuple[str, ...]:
        return (self.policy_type, HOTLOOP_TYPE) if self.policy_type else (HOTLOOP_TYPE,)


@dataclass(frozen=True)
class ClientSetup:
    """One client's accepted instructions."""

    features: FeatureMap
    actions_per_chunk: int
    policy_type: str
    device: str


def _config_type(folder: Path, key: str = "type") -> str | None:
    try:
        value = json.loads((folder / "config.json").read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _lerobot_type(target: str) -> str | None:
    """The LeRobot `type` behind a target: a checkpoint folder's config.json, an artifact's source
    checkpoint (its manifest's `source`), a shipped checkpoint demo's folder."""
    path = Path(target)
    # An artifact first: the config.json a compile writes beside its manifest (for LeRobot's plugin) says
    # "hotloop", which the server accepts anyway; the client names the source's type.
    if (path / "manifest.json").is_file():
        try:
            manifest: Any = json.loads((path / "manifest.json").read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict):
            return None
        source = manifest.get("target")
        found = _lerobot_type(source) if isinstance(source, str) and source != target else None
        kind = manifest.get("kind")  # the family it was compiled from, when its source is gone
        # the source's type as the plugin's config.json records it, when the source folder is gone
        return found or _config_type(path, "source_type") or (kind if isinstance(kind, str) else None)
    if (path / "config.json").is_file():
        return _config_type(path)
    if target.startswith("demo:conveyor-"):
        from hotloop.demos.checkpoints import asset_dir
        from hotloop.errors import ConfigError

        try:
            return _config_type(asset_dir(target))
        except ConfigError:
            return None
    return None


def served_target(target: str, served: ServedPolicy) -> ServedTarget:
    names = {target}
    path = Path(target)
    if path.exists():
        resolved = path.resolve()
        names |= {str(resolved), resolved.name}
    actions = served.action_spec.get("actions")
    horizon = int(actions.shape[0]) if actions is not None and len(actions.shape) == 2 else 1
    return ServedTarget(target, frozenset(names), _lerobot_type(target), horizon, served)


def check_instructions(config: RemotePolicyConfig, target: ServedTarget) -> ClientSetup:
    """The client's instructions accepted, or `Mismatch` naming what does not fit."""
    if config.policy_type not in target.accepted_types:
        raise Mismatch(
            f"policy_type {config.policy_type!r}: this server serves {target.name} "
            f"({' or '.join(map(repr, target.accepted_types))}); pass --policy_type={target.accepted_types[0]}"
        )
    if config.pretrained_name_or_path not in target.names:
        raise Mismatch(
            f"pretrained_name_or_path {config.pretrained_name_or_path!r} is not what this server serves "
            f"({target.name!r}; it never loads what a client names); pass --pretrained_name_or_path={target.name}"
        )
    if not 1 <= config.actions_per_chunk <= target.horizon:
        raise Mismatch(
            f"actions_per_chunk {config.actions_per_chunk}: {target.name} answers chunks of {target.horizon} "
            f"actions; pass --actions_per_chunk between 1 and {target.horizon}"
        )
    features = map_features(config.lerobot_features, config.rename_map, target.served.observation_spec)
    return ClientSetup(features, config.actions_per_chunk, config.policy_type, config.device)
