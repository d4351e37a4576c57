"""How a target reads recorded frames, for calibration, sensitivity and QAT: `load_target` gives the
target's fp32 model and its `TargetAdapter` (`hotloop.families.frames`), through the target's own `data`
entry (a family's targets, the shipped demos, a checkpoint folder). `check_fits` refuses data shaped for
another model before any frame is decoded.
"""

from __future__ import annotations

from typing import Any

from hotloop.families.frames import DataLimits, TargetAdapter, check_fits

__all__ = ["DataLimits", "TargetAdapter", "check_fits", "load_target"]


def load_target(
    target: str, dataset: Any, seed: int = 0, num_steps: int | None = None, model: Any = None
) -> tuple[Any, TargetAdapter]:
    """(fp32 model, adapter) of a policy target reading `dataset`; `model`: one already built for it."""
    from hotloop.compile.sources import compilable_entry
    from hotloop.errors import ConfigError
    from hotloop.targets import TargetOptions

    entry = compilable_entry(target)
    if entry.data is None:
        raise ConfigError(f"target {target!r} cannot read recorded frames (no dataset adapter yet)")
    return entry.build_data(target, dataset, TargetOptions(num_steps=num_steps, seed=seed), model)  # type: ignore[no-any-return]
