"""A sub-engine's manifest entry against the runner its files load into (shared by both load paths)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from hotloop.compile.backends.base import Runner
from hotloop.errors import CheckpointError


def check_recorded_io(where: Path, name: str, entry: Any, runner: Runner) -> None:
    """The I/O a sub-engine's manifest entry records is the I/O its config builds: an entry edited or
    written for another config is refused by name at load, not discovered as a shape error mid-run."""

    def dtype(t: Tensor) -> str:
        return str(t.dtype).replace("torch.", "")

    built = {
        "input_names": list(runner.input_names),
        "input_shapes": [list(x.shape) for x in runner.inputs],
        "input_dtypes": [dtype(x) for x in runner.inputs],
        "output_names": list(runner.output_names),
        "output_shapes": [list(y.shape) for y in runner.outputs],
        "output_dtypes": [dtype(y) for y in runner.outputs],
    }
    for field, value in built.items():
        recorded = getattr(entry, field)
        if recorded != value:
            shown = str(recorded) if len(str(recorded)) <= 120 else str(recorded)[:117] + "..."
            raise CheckpointError(
                f"{where}: sub-engine {name!r} records {field} {shown}, but the manifest's config builds "
                f"{value}; the manifest was edited or belongs to another model: recompile the artifact"
            )
