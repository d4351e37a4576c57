"""`toy:mlp`: an MLP from a state vector to an action chunk — a small real workload for the harness, and
the second family behind the protocol (`hotloop.families.toy`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hotloop.measure.stages import StageTimer, null_timer


@dataclass(frozen=True)
class ToyConfig:
    state_dim: int = 32
    hidden: int = 1024
    depth: int = 3
    horizon: int = 50
    action_dim: int = 14


class ToyMLPPolicy(nn.Module):
    """state (B, state_dim) -> action chunk (B, horizon, action_dim)."""

    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        layers: list[nn.Module] = [nn.Linear(config.state_dim, config.hidden), nn.GELU()]
        for _ in range(config.depth - 1):
            layers += [nn.Linear(config.hidden, config.hidden), nn.GELU()]
        self.encoder = nn.Sequential(*layers)
        self.head = nn.Linear(config.hidden, config.horizon * config.action_dim)

    @property
    def cfg(self) -> ToyConfig:
        return self.config

    def forward(self, state: torch.Tensor, timer: StageTimer | None = None) -> torch.Tensor:
        timer = timer or null_timer()
        with timer.stage("encoder"):
            h = self.encoder(state)
        with timer.stage("head"):
            out = self.head(h)
        return out.view(state.shape[0], self.config.horizon, self.config.action_dim)
