"""The options every demo trainer shares, checked once: a family's config subclasses one of these and
declares only its own fields and the defaults its shipped run differs in.

- `TrainOptions`: the optimiser and its schedule, the seed and torch's thread count (every trainer).
- `RecordedDemoOptions`: + the expert episodes recorded when no `--dataset` is given (`hotloop record`'s
  task, difficulty, DART noise, recovery starts and seeds).
- `CameraDemoOptions`: + the camera views read (and recorded), in model order.

`from_flags` is `hotloop train-demo`'s side: a config from the flags given, the others at the family's
defaults (its shipped run).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from hotloop.errors import ConfigError
from hotloop.train.loop import Schedule

# The counts every trainer that has them needs at least 1 of.
_POSITIVE = ("episodes", "steps", "batch", "threads")


@dataclass(frozen=True)
class TrainOptions:
    """The defaults are the shipped runs' most common; a family redeclares the ones its run differs in."""

    steps: int = 2000
    batch: int = 32
    lr: float = 1e-3
    min_lr: float = 1e-5
    warmup: int = 100
    weight_decay: float = 1e-4
    grad_clip: float = 10.0
    seed: int = 0
    threads: int = 1  # one thread: the same weights on any machine, and no stalls on a shared CPU

    def __post_init__(self) -> None:
        self.check_positive(*(name for name in _POSITIVE if hasattr(self, name)))
        if not 0 < self.lr < 1:
            raise ConfigError(f"train-demo lr must be in (0, 1) (got {self.lr})")

    def check_positive(self, *names: str) -> None:
        """Refuse a count below 1, named as its flag (`--steps`, `--noise-draws`)."""
        for name in names:
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")

    def schedule(self) -> Schedule:
        return Schedule(self.steps, self.lr, self.min_lr, self.warmup, self.weight_decay, self.grad_clip)


@dataclass(frozen=True)
class RecordedDemoOptions(TrainOptions):
    task: str = "conveyor-pick"
    difficulty: str = "medium"
    episodes: int = 300
    action_noise: float = 0.01  # DART: executed targets perturbed by this std (m), labels clean
    recovery_starts: float = 0.3  # fraction of episodes that start in a recovery state (recorder.py)
    record_seed: int = 10_000  # recording seeds start here: disjoint from evaluation seeds (0, 1, ...)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.recovery_starts <= 1.0:
            raise ConfigError(
                f"train-demo recovery_starts (`hotloop record --recovery-starts`) must be in [0, 1] (got "
                f"{self.recovery_starts})"
            )

    def record_options(self) -> dict[str, Any]:
        """`hotloop.datasets.recorder.record`'s arguments for the episodes this run trains on."""
        recorded = ("task", "episodes", "difficulty", "action_noise", "recovery_starts")
        return {**{name: getattr(self, name) for name in recorded}, "seed": self.record_seed}


@dataclass(frozen=True)
class CameraDemoOptions(RecordedDemoOptions):
    views: tuple[str, ...] = ("top", "wrist")

    def __post_init__(self) -> None:
        super().__post_init__()
        from hotloop.train.data import check_view_names  # which exist: the dataset says (training_views)

        check_view_names(self.views)

    def record_options(self) -> dict[str, Any]:
        return {**super().record_options(), "views": self.views}


Options = TypeVar("Options", bound=TrainOptions)


def from_flags(options: type[Options], **flags: Any) -> Options:
    """`options` with the flags given set (None: not given, the family's default); views as a tuple."""
    given = {name: value for name, value in flags.items() if value is not None}
    if "views" in given:
        given["views"] = tuple(given["views"])
    return options(**given)


def summary_config(options: TrainOptions) -> dict[str, Any]:
    """The options as a summary file holds them (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(options).items()}
