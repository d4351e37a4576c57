"""ACT's temporal ensembling (LeRobot's `ACTTemporalEnsembler`), with LeRobot's numerics bit for bit.

The policy predicts a chunk every control step; the action executed at step t is the weighted average of
every chunk's prediction for t, with weights w_i = exp(-coeff * i), i = 0 the OLDEST prediction (coeff > 0
favours old predictions, 0 weighs all equally, < 0 favours new ones; ACT's paper uses 0.01).

LeRobot computes the average online rather than from a history: each pending step keeps its running
average and a count of predictions in it, and a new prediction enters as

    avg <- (avg * W[count - 1] + new * w[count]) / W[count],      W = cumsum(w)

after which the first pending step is consumed. This module repeats those float operations in the same
order, so its actions equal LeRobot's exactly (not just to rounding): the weights come from torch's own
`exp` and `cumsum` (which accumulates float32 in double) when torch is importable, as it is beside any
model; a robot-side client without torch gets numpy's, which may differ in the last bit of a weight.
Nothing imports torch at module level (see `hotloop.realtime`).
"""

from __future__ import annotations

import math

import numpy as np

from hotloop.errors import ConfigError


def ensemble_weights(coeff: float, chunk_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(w, cumsum(w)), float32 (chunk_size,), computed as LeRobot does: torch.exp(-coeff * arange)."""
    try:
        import torch
    except ImportError:  # robot-side client without torch: float64 exp then float32, double-accumulated sum
        w64 = np.exp((np.float32(-coeff) * np.arange(chunk_size, dtype=np.float32)).astype(np.float64))
        weights = w64.astype(np.float32)
        return weights, np.cumsum(weights.astype(np.float64)).astype(np.float32)
    w = torch.exp(-coeff * torch.arange(chunk_size))
    return w.numpy(), torch.cumsum(w, dim=0).numpy()


def checked_weights(coeff: float, chunk_size: int) -> tuple[np.ndarray, np.ndarray]:
    """`ensemble_weights`, refused when they cannot average (a bad coefficient or chunk)."""
    if not math.isfinite(coeff):
        raise ConfigError(f"temporal_ensemble_coeff must be a finite number (got {coeff})")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ConfigError(f"temporal ensembling needs chunk_size >= 1 (got {chunk_size!r})")
    weights, cumsum = ensemble_weights(float(coeff), chunk_size)
    if not (np.isfinite(cumsum).all() and cumsum[-1] > 0):
        raise ConfigError(
            f"temporal_ensemble_coeff {coeff} over a chunk of {chunk_size} makes the weights "
            f"exp(-coeff * i) overflow float32 (the average would be NaN); use a coefficient of "
            f"smaller magnitude"
        )
    return weights, cumsum


class TemporalEnsembler:
    """Online exponentially weighted average of overlapping chunks; `update` returns the next action.

    `update(chunk (B, chunk_size, A))` once per control step, `reset()` at every episode start.
    """

    def __init__(self, coeff: float, chunk_size: int) -> None:
        self.coeff = float(coeff)
        self.chunk_size = chunk_size
        self.weights, self.weights_cumsum = checked_weights(self.coeff, chunk_size)
        self.reset()

    def reset(self) -> None:
        """Forget every pending prediction (a new episode)."""
        self._average: np.ndarray | None = None  # (B, pending, A) running averages
        self._count: np.ndarray | None = None  # (pending, 1) int64: predictions in each average

    def update(self, actions: np.ndarray) -> np.ndarray:
        """Fold a new chunk (B, chunk_size, A) into the ensemble and pop the action for this step (B, A)."""
        actions = np.asarray(actions)
        if actions.dtype not in (np.float32, np.float64):
            actions = actions.astype(np.float64)
        if actions.ndim != 3 or actions.shape[1] != self.chunk_size:
            raise ConfigError(
                f"temporal ensembling expects chunks (batch, {self.chunk_size}, action_dim), "
                f"got shape {actions.shape}"
            )
        if self._average is None or self._count is None:
            average = actions.copy()
            count = np.ones((self.chunk_size, 1), dtype=np.int64)
        else:
            if actions.shape[0] != self._average.shape[0] or actions.shape[2] != self._average.shape[2]:
                raise ConfigError(
                    f"chunk shape {actions.shape} differs from the episode's (batch {self._average.shape[0]}, "
                    f"action_dim {self._average.shape[2]}); call reset() when the batch or robot changes"
                )
            # The same in-place operations, in the same order and dtype, as LeRobot's update.
            average = self._average
            average *= self.weights_cumsum[self._count - 1]
            average += actions[:, :-1] * self.weights[self._count]
            average /= self.weights_cumsum[self._count]
            count = np.minimum(self._count + 1, self.chunk_size)
            # The newest chunk's last step has no earlier prediction: it starts its own average.
            average = np.concatenate([average, actions[:, -1:]], axis=1)
            count = np.concatenate([count, np.ones_like(count[-1:])])
        action = average[:, 0].copy()
        self._average, self._count = average[:, 1:], count[1:]
        return action


class TimedEnsembler:
    """`TemporalEnsembler` on a clock, for chunks that arrive late (the `ensemble` strategy): the same
    online average and the same float operations, kept per control period instead of per step.

    A chunk observed at tick `origin` plans action j for the period starting at `origin + j * period`.
    `add` folds every action into its period's running average, in arrival order (so the i-th prediction
    for a period gets weight w_i, i = 0 the oldest, as in LeRobot), skipping periods that have already
    started; `action` is the average for a period start (what the robot executes then) from the chunks
    that have arrived by then. With a chunk every period and no delay it gives `TemporalEnsembler.update`'s
    actions exactly. It has the blender shape the chunk scheduler calls (`add`, `action`).
    """

    def __init__(self, coeff: float, chunk_size: int, period: int) -> None:
        if period < 1:
            raise ConfigError(f"control period must be >= 1 tick (got {period})")
        self.coeff = float(coeff)
        self.chunk_size = chunk_size
        self.period = period
        self.weights, self.weights_cumsum = checked_weights(self.coeff, chunk_size)
        self._pending: dict[int, tuple[np.ndarray, int]] = {}  # period start -> (average, predictions)
        self._floor: int | None = None  # the latest period start executed or asked for

    def add(self, actions: np.ndarray, origin: int) -> None:
        actions = np.asarray(actions)
        if actions.ndim != 2 or actions.shape[0] != self.chunk_size:
            raise ConfigError(
                f"temporal ensembling expects chunks ({self.chunk_size}, action_dim), got shape {actions.shape}"
            )
        for j in range(self.chunk_size):
            tick = origin + j * self.period
            if self._floor is not None and tick < self._floor:
                continue  # that period has begun: its action was formed without this chunk
            entry = self._pending.get(tick)
            if entry is None:
                self._pending[tick] = (actions[j].copy(), 1)
                continue
            average, count = entry
            # LeRobot's update for one step, in its order and dtype.
            average = average * self.weights_cumsum[count - 1]
            average = average + actions[j] * self.weights[count]
            average = average / self.weights_cumsum[count]
            self._pending[tick] = (average, min(count + 1, self.chunk_size))

    def action(self, actions: np.ndarray, index: int, start: int) -> np.ndarray:
        """The ensembled action for the period starting at `start` (`actions[index]`, the newest chunk's
        own, when no average holds that period)."""
        self._floor = start if self._floor is None else max(self._floor, start)
        for tick in [t for t in self._pending if t < start]:
            del self._pending[tick]
        entry = self._pending.get(start)
        return np.asarray(actions[index]) if entry is None else entry[0]

    def predictions(self, start: int) -> int:
        """How many chunks' predictions the action of the period at `start` averages (0: none)."""
        entry = self._pending.get(start)
        return 0 if entry is None else entry[1]


__all__ = ["TemporalEnsembler", "TimedEnsembler", "checked_weights", "ensemble_weights"]
