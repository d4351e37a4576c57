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


class TemporalEnsembler:
    """Online exponentially weighted average of overlapping chunks; `update` returns the next action.

    `update(chunk (B, chunk_size, A))` once per control step, `reset()` at every episode start.
    """

    def __init__(self, coeff: float, chunk_size: int) -> None:
        if not math.isfinite(coeff):
            raise ConfigError(f"temporal_ensemble_coeff must be a finite number (got {coeff})")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ConfigError(f"temporal ensembling needs chunk_size >= 1 (got {chunk_size!r})")
        self.coeff = float(coeff)
        self.chunk_size = chunk_size
        self.weights, self.weights_cumsum = ensemble_weights(self.coeff, chunk_size)
        if not (np.isfinite(self.weights_cumsum).all() and self.weights_cumsum[-1] > 0):
            raise ConfigError(
                f"temporal_ensemble_coeff {coeff} over a chunk of {chunk_size} makes the weights "
                f"exp(-coeff * i) overflow float32 (the average would be NaN); use a coefficient of "
                f"smaller magnitude"
            )
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


__all__ = ["TemporalEnsembler", "ensemble_weights"]
