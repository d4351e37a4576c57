"""What `hotloop train-demo` needs of a family's demo trainer (each trainer module's `TRAINER`): the
options it takes, the training it runs, the demo `--ship` makes of it, and what the line it says when
done reports.

The command (`hotloop.train.commands`) parses and checks the flags, builds the options
(`hotloop.train.options.from_flags`) and claims the output folder once for every family; a trainer
states only what is its own.
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
    target: str  # the shipped demo `--ship` replaces
    ship: Callable[[Path], Path]  # output folder -> the asset folder it was copied into
    # The done line's final losses: (label, key of the summary's "training" block).
    finals: tuple[tuple[str, str], ...] = (("loss", "final_loss"),)
    # What the done line says was written ({out}: the folder, {task}: the summary's task).
    wrote: str = "{out} (loss curve {out}/loss.png)"
    # A trainer whose done line is its own (summary, output folder) -> line.
    report: Callable[[dict[str, Any], Path], str] | None = None

    def run(
        self, options: TrainOptions, out: Path, dataset: Path | None, ship: bool, say: Callable[[str], None]
    ) -> None:
        """Train, say how it went, and ship the result if asked."""
        summary = self.train(options, out, dataset)
        say(self.report(summary, out) if self.report is not None else self.done_line(summary, out))
        if ship:
            say(f"shipped to {self.ship(out)} ({self.target})")

    def done_line(self, summary: dict[str, Any], out: Path) -> str:
        """The model's size (where the summary has it), the seconds recording and training took, the final
        losses, and what was written."""
        tr = summary["training"]
        size = f" {summary['parameters'] / 1e6:.2f} M parameters" if "parameters" in summary else ""
        finals = ", ".join(f"{label} {tr[key]:.4f}" for label, key in self.finals)
        wrote = self.wrote.format(out=out, task=summary.get("task"))
        return f"trained{size} in {tr['train_s']:.0f} s (recording {tr['record_s']:.0f} s); final {finals}; wrote {wrote}"


def ship_checkpoint(family: str) -> Callable[[Path], Path]:
    """`--ship` for a demo shipped as a LeRobot checkpoint folder (`hotloop.demos.checkpoints.ship`)."""

    def ship(out: Path) -> Path:
        from hotloop.demos.checkpoints import ship as ship_folder

        return ship_folder(out, family)

    return ship


# The next step the LeRobot demos' done line names.
TRY_EVAL = "the checkpoint {out} (try `hotloop eval {out} --task {task}`)"
