"""How an executed action is formed from the chunks that plan for its control period (non-RTC strategies).

- `latest`: the newest chunk alone (what async does by default).
- `average`: a weighted average of the newest chunk and the one it replaced, where both plan the period.
- `ensemble`: ACT's temporal ensembling: every recent chunk that plans the period, weighted
  exp(-m * i) with i = 0 the oldest prediction (Zhao et al. 2023; m = 0.01 there), so that new
  observations enter slowly and the commanded trajectory stays smooth.

A chunk "plans" a period when one of its actions is meant for it: action j of a chunk with origin o is
for the period starting at o + j * period (the nearest j when a chunk's grid is offset, as after a
hold-while-inferring strategy).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from hotloop.errors import ConfigError

BLENDS = ("latest", "average", "ensemble")


@dataclass(frozen=True)
class BlendConfig:
    kind: str = "latest"
    new_weight: float = 0.5  # average: weight of the newest chunk
    ensemble_decay: float = 0.01  # ensemble: m in exp(-m * i)
    max_chunks: int = 8  # ensemble: how many recent chunks are kept

    def __post_init__(self) -> None:
        if self.kind not in BLENDS:
            raise ConfigError(f"--blend {self.kind!r} is not known; use one of {', '.join(BLENDS)}")
        if not 0.0 < self.new_weight <= 1.0:
            raise ConfigError(f"blend new_weight must be in (0, 1] (got {self.new_weight})")
        if not (self.ensemble_decay >= 0 and math.isfinite(self.ensemble_decay)):
            raise ConfigError(f"blend ensemble_decay must be >= 0 (got {self.ensemble_decay})")
        if self.max_chunks < 1:
            raise ConfigError(f"blend max_chunks must be >= 1 (got {self.max_chunks})")


@dataclass(frozen=True)
class _Plan:
    actions: np.ndarray
    origin: int


class ChunkBlender:
    """Keeps the recent chunks and returns the action to execute for a period."""

    def __init__(self, config: BlendConfig, period: int) -> None:
        self.config = config
        self.period = period
        keep = 1 if config.kind == "latest" else (2 if config.kind == "average" else config.max_chunks)
        self._plans: deque[_Plan] = deque(maxlen=keep)

    def add(self, actions: np.ndarray, origin: int) -> None:
        self._plans.append(_Plan(actions, origin))

    def _planned(self, plan: _Plan, start: int) -> np.ndarray | None:
        j = math.floor((start - plan.origin) / self.period + 0.5)
        return plan.actions[j] if 0 <= j < len(plan.actions) else None

    def action(self, actions: np.ndarray, index: int, start: int) -> np.ndarray:
        """The action for the period starting at `start`, where the newest chunk `actions` says
        `actions[index]`."""
        newest = actions[index]
        if self.config.kind == "latest" or len(self._plans) < 2:
            return newest
        older = [a for p in list(self._plans)[:-1] if (a := self._planned(p, start)) is not None]
        if not older:
            return newest
        if self.config.kind == "average":
            w = self.config.new_weight
            return w * newest + (1.0 - w) * older[-1]
        stacked = np.stack([*older, newest])  # oldest first, as ACT orders them
        weights = np.exp(-self.config.ensemble_decay * np.arange(len(stacked)))
        return (weights[:, None] * stacked).sum(axis=0) / weights.sum()
