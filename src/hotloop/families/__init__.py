"""Policy families: each one a package behind the protocol in `hotloop.families.protocol`.

`FAMILIES` is the one table from a family's name (what an artifact's manifest records as its `kind`) to
its class, imported only when used; `LEROBOT_TYPES` maps a LeRobot checkpoint's `config.json` `type` to
the family that reads it. A new family adds one row to each (and its package, see docs/architecture.md).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from hotloop.errors import CheckpointError
from hotloop.registry import Registry

if TYPE_CHECKING:
    from hotloop.families.protocol import PolicyFamily

FAMILIES: dict[str, str] = {
    "pi": "hotloop.families.pi.family:PiFamily",
    "toy": "hotloop.families.toy.family:ToyFamily",
    "act": "hotloop.families.act.family:ActFamily",
    "diffusion": "hotloop.families.diffusion.family:DiffusionFamily",
    "smolvla": "hotloop.families.smolvla.family:SmolVLAFamily",
}
LEROBOT_TYPES: dict[str, str] = {
    "pi0": "pi",
    "pi05": "pi",
    "act": "act",
    "diffusion": "diffusion",
    "smolvla": "smolvla",
}
# A checkpoint folder of each family as a target: a module with build_bench, build_policy, build_source,
# build_data (the `hotloop.targets.TargetEntry` hooks, called with the folder's path) and verify.
CHECKPOINT_TARGETS: dict[str, str] = {
    "pi": "hotloop.families.pi.checkpoint_targets",
    "act": "hotloop.families.act.checkpoint_targets",
    "diffusion": "hotloop.families.diffusion.checkpoint_targets",
    "smolvla": "hotloop.families.smolvla.checkpoint_targets",
}


def _registry() -> Registry[str]:
    return Registry.of("policy family", FAMILIES.items())


def get_family(name: str) -> PolicyFamily:
    """The family called `name` (an unknown name lists the known ones)."""
    module, attr = _registry().get(name).split(":")
    return importlib.import_module(module).__dict__[attr]()  # type: ignore[no-any-return]


def is_checkpoint_dir(path: Path) -> bool:
    """A LeRobot checkpoint folder: `config.json` beside `model.safetensors`."""
    return (path / "config.json").is_file() and (path / "model.safetensors").is_file()


def checkpoint_type(path: Path) -> str:
    """The LeRobot policy `type` of the checkpoint folder `path`, checked against the families that
    read it (a CheckpointError naming the file and the field otherwise)."""
    from hotloop.models.checkpoint_meta import read_json_object

    config = path / "config.json"
    lerobot_type = read_json_object(config).get("type")
    family_for_type(lerobot_type, config)
    return str(lerobot_type)


def checkpoint_targets(path: Path) -> str:
    """The module whose functions make the checkpoint folder `path` a target (`CHECKPOINT_TARGETS`)."""
    family = LEROBOT_TYPES[checkpoint_type(path)]
    if family not in CHECKPOINT_TARGETS:
        raise CheckpointError(f"{path / 'config.json'}: family {family} cannot run a checkpoint folder yet")
    return CHECKPOINT_TARGETS[family]


def family_for_type(lerobot_type: object, config: Path) -> PolicyFamily:
    """The family that reads LeRobot checkpoints of `type` `lerobot_type`, or a CheckpointError naming the
    file, the field and the types hotloop reads."""
    if not isinstance(lerobot_type, str) or lerobot_type not in LEROBOT_TYPES:
        raise CheckpointError(
            f"{config}: field 'type' is {lerobot_type!r}; hotloop runs the LeRobot policy types "
            f"{', '.join(sorted(LEROBOT_TYPES))}"
        )
    return get_family(LEROBOT_TYPES[lerobot_type])
