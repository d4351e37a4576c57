"""LeRobot's per-episode state of a policy, family by family, kept as LeRobot 0.4's policies keep it:

- `ActionQueue`: ACT (without ensembling), Diffusion Policy, SmolVLA: a `deque(maxlen=n_action_steps)` of
  (B, A) actions, refilled from one chunk when it runs empty.
- `ObservationHistory`: Diffusion Policy's `populate_queues`: the last `n_obs_steps` observations per
  input key, the first observation of an episode copied into every slot.
- ACT's temporal ensembling is `hotloop.realtime.temporal_ensemble.TemporalEnsembler`, which repeats
  LeRobot's `ACTTemporalEnsembler` arithmetic operation for operation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import Tensor


class ActionQueue:
    def __init__(self, n_action_steps: int) -> None:
        self.n_action_steps = n_action_steps
        self._queue: deque[Tensor] = deque(maxlen=n_action_steps)

    def next(self, refill: Callable[[], Tensor]) -> Tensor:
        """The next (B, A) action; `refill()` (a (B, T, A) chunk) is called only when the queue is empty."""
        if not self._queue:
            chunk = refill()[:, : self.n_action_steps]
            self._queue.extend(chunk.transpose(0, 1))
        return self._queue.popleft()


class ObservationHistory:
    def __init__(self, keys: Iterable[str], n_obs_steps: int) -> None:
        self._queues: dict[str, deque[Tensor]] = {k: deque(maxlen=n_obs_steps) for k in keys}

    @property
    def empty(self) -> bool:
        return not any(self._queues.values())

    def push(self, batch: Mapping[str, Tensor]) -> None:
        for key, queue in self._queues.items():
            if key not in batch:
                continue
            while len(queue) < (queue.maxlen or 0) - 1:  # an episode's first observation fills the history
                queue.append(batch[key])
            queue.append(batch[key])

    def stacked(self) -> dict[str, Tensor]:
        """Every key's history as (B, n_obs_steps, ...), oldest first."""
        return {k: torch.stack(list(q), dim=1) for k, q in self._queues.items() if q}


__all__ = ["ActionQueue", "ObservationHistory"]
