"""One timed inference, as the harness runs it: `run(timer)` does the work and marks stages on `timer`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hotloop.measure.stages import StageTimer


@dataclass
class BenchCase:
    """One timed inference: `run(timer)` does the work and marks stages on `timer`."""

    name: str
    run: Callable[[StageTimer], Any]
    info: dict[str, Any] = field(default_factory=dict)  # sizes, parameter count, dtype...
    device: str = "cpu"
