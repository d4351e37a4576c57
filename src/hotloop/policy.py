"""The policy interface shared by the evaluator, the real-time runners and the policy server.

It matches openpi-client's `BasePolicy` (`infer(obs) -> dict`, `reset()`), so an openpi websocket client
and a local model are interchangeable. Real-time chunking rides on the same call: the observation may
carry `rtc_prev_actions`, `rtc_delay` and `rtc_max_guidance_weight`, and a policy that inpainted its chunk
onto them answers `rtc_guided: True` (`hotloop.realtime.rtc`).
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
