"""The policy interface shared by the evaluator, the real-time runners and the policy server.

It matches openpi-client's `BasePolicy` (`infer(obs) -> dict`, `reset()`), so an openpi websocket client
and a local model are interchangeable.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Policy(Protocol):
    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        """Return at least {"actions": array of shape (horizon, action_dim)} for one observation."""
        ...

    def reset(self) -> None:
        """Forget any episode state (called at the start of every episode)."""
        ...
