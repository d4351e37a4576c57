"""What `hotloop compile TARGET` compiles: a policy target whose family builds a source (the pi targets,
the shipped demo policies, a LeRobot checkpoint folder...), or an ONNX file.

A policy source (`hotloop.families.protocol.PolicySource`) carries the fp32 model, one real observation and
the noise the final actions are compared under, and the `policy` description an artifact needs to drive
a robot after loading. Each target says how to build its own (`TargetEntry.source`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError
from hotloop.families.frames import TargetAdapter
from hotloop.families.protocol import PolicySource


def is_onnx_target(target: str) -> bool:
    return target.endswith(".onnx")


def compilable_entry(target: str, flag: str = "TARGET") -> Any:
    """The target's entry when it can be compiled; otherwise a ConfigError naming what can."""
    from hotloop.targets import default_targets, find_target

    entry = find_target(target)
    if entry.source is None:
        known = [n for n, e in default_targets().items() if e.source is not None]
        raise ConfigError(
            f"cannot compile target {target!r}: it has no sub-engines to plan; use a policy target "
            f"({', '.join(known)}), a LeRobot checkpoint folder, or a path to an .onnx file with "
            "--input NAME:SHAPE"
        )
    return entry


def policy_source(target: str, options: Any) -> PolicySource:
    """The compile source of a policy target (refused by name when it has none)."""
    return compilable_entry(target).build_source(target, options)  # type: ignore[no-any-return]


def onnx_path(target: str) -> Path:
    path = Path(target)
    if not path.is_file():
        raise ConfigError(f"ONNX file {target} does not exist")
    return path


def load_target(
    target: str, dataset: Any, seed: int = 0, num_steps: int | None = None, model: Any = None
) -> tuple[Any, TargetAdapter]:
    """(fp32 model, adapter) of a policy target reading `dataset`; `model`: one already built for it."""
    from hotloop.errors import ConfigError
    from hotloop.targets import TargetOptions

    entry = compilable_entry(target)
    if entry.data is None:
        raise ConfigError(f"target {target!r} cannot read recorded frames (no dataset adapter yet)")
    return entry.build_data(target, dataset, TargetOptions(num_steps=num_steps, seed=seed), model)  # type: ignore[no-any-return]
