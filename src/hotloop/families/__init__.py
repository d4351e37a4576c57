"""Policy families: each one a package behind the protocol in `hotloop.families.protocol`.

`FAMILIES` is the one table from a family's name (what an artifact's manifest records as its `kind`) to
its class, imported only when used; `LEROBOT_TYPES` maps a LeRobot checkpoint's `config.json` `type` to
the family that reads it. A new family adds one row to each (and its package, see docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hotloop.errors import CheckpointError
from hotloop.registry import Registry

if TYPE_CHECKING:
    from pathlib import Path

    from hotloop.families.protocol import PolicyFamily

FAMILIES: dict[str, str] = {
    "pi": "hotloop.families.pi.family:PiFamily",
    "toy": "hotloop.families.toy.family:ToyFamily",
}
LEROBOT_TYPES: dict[str, str] = {"pi0": "pi", "pi05": "pi"}


def _registry() -> Registry[str]:
    registry: Registry[str] = Registry("policy family")
    for name, path in FAMILIES.items():
        registry.register(name, path)
    return registry


def get_family(name: str) -> PolicyFamily:
    """The family called `name` (an unknown name lists the known ones)."""
    module, attr = _registry().get(name).split(":")
    return importlib.import_module(module).__dict__[attr]()  # type: ignore[no-any-return]


def family_for_type(lerobot_type: object, config: Path) -> PolicyFamily:
    """The family that reads LeRobot checkpoints of `type` `lerobot_type`, or a CheckpointError naming the
    file, the field and the types hotloop reads."""
    if not isinstance(lerobot_type, str) or lerobot_type not in LEROBOT_TYPES:
        raise CheckpointError(
            f"{config}: field 'type' is {lerobot_type!r}; hotloop runs the LeRobot policy types "
            f"{', '.join(sorted(LEROBOT_TYPES))}"
        )
    return get_family(LEROBOT_TYPES[lerobot_type])
