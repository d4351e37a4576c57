"""What `hotloop train-demo` needs of a family's demo trainer (each trainer module's `TRAINER`): the
options it takes, the training it runs, the line it says when done, and the demo `--ship` makes of it.

The command (`hotloop.train.commands`) parses and checks the flags, claims the output folder and builds
the options (`hotloop.train.options.from_flags`) once for every family; a trainer states only what is
its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hotloop.train.options import TrainOptions


@dataclass(frozen=True)
class DemoTrainer:
    options: type[TrainOptions]
    # (options, output folder, --dataset or None) -> the summary the run wrote
    train: Callable[[Any, Path, Path | None], dict[str, Any]]
    # (summary, output folder) -> the one line said when training is done
    report: Callable[[dict[str, Any], Path], str]
    target: str  # the shipped demo `--ship` replaces
    ship: Callable[[Path], Path]  # output folder -> the asset folder it was copied into

    def run(
        self, options: TrainOptions, out: Path, dataset: Path | None, ship: bool, say: Callable[[str], None]
    ) -> None:
        """Train, say how it went, and ship the result if asked."""
        summary = self.train(options, out, dataset)
        say(self.report(summary, out))
        if ship:
            say(f"shipped to {self.ship(out)} ({self.target})")
