"""The toy MLP's observation and its policy (raw `obs["state"]` in, an action chunk out)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.models.toy import ToyConfig, ToyMLPPolicy


@dataclass
class ToyObservation:
    """Model-space input: the state (B, state_dim), zero-padded."""

    state: Tensor


def toy_spec(cfg: ToyConfig) -> Any:
    """A state vector in, an untrained action chunk out (no images, no meaning)."""
    from hotloop.policy_spec import PolicySpec

    return PolicySpec(
        state_dim=cfg.state_dim, action_dim=cfg.action_dim, action_meaning="any", horizon=cfg.horizon
    )


class ToyPolicy:
    """The Policy protocol over the MLP: reads obs["state"], returns an action chunk. `run` computes the
    chunk from the model-space state (the eager model, or a compiled engine)."""

    def __init__(self, model: ToyMLPPolicy, device: str, run: Any = None) -> None:
        self.model = model
        self.config = model.config
        self.device = device
        self.run = run

    def reset(self) -> None:
        pass

    @property
    def observation_spec(self) -> dict[str, Any]:
        from hotloop.policy_spec import ArraySpec

        return {"state": ArraySpec((self.config.state_dim,), "float32")}

    @property
    def spec(self) -> Any:
        """A state vector in, an untrained action chunk out (no images, no meaning)."""
        return toy_spec(self.config)

    @torch.inference_mode()
    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        cfg = self.config
        if "state" not in obs:
            raise ConfigError("obs must hold 'state', a vector of numbers")
        state = np.zeros(cfg.state_dim, dtype=np.float32)
        given = np.asarray(obs["state"], dtype=np.float32).ravel()[: cfg.state_dim]
        state[: given.size] = given
        x = torch.from_numpy(state)[None]
        if self.run is not None:
            return {"actions": self.run(ToyObservation(x))[0].float().cpu().numpy().copy()}
        x = x.to(self.device, dtype=next(self.model.parameters()).dtype)
        return {"actions": self.model(x)[0].float().cpu().numpy()}
