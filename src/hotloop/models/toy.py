"""`toy:mlp`: an MLP from a state vector to an action chunk — a small real workload for the harness."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from hotloop.errors import ConfigError
from hotloop.measure.stages import StageTimer, null_timer
from hotloop.targets import BenchCase, TargetOptions, check_fits_memory

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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

    def forward(self, state: torch.Tensor, timer: StageTimer | None = None) -> torch.Tensor:
        timer = timer or null_timer()
        with timer.stage("encoder"):
            h = self.encoder(state)
        with timer.stage("head"):
            out = self.head(h)
        return out.view(state.shape[0], self.config.horizon, self.config.action_dim)


def _build(config_name: str, options: TargetOptions) -> tuple[ToyMLPPolicy, ToyConfig]:
    if config_name != "mlp":
        raise ConfigError(f"unknown toy config {config_name!r}; known: mlp")
    options.reject_unsupported(f"toy:{config_name}", {"horizon", "action_dim", "dtype", "batch", "device"})
    config = ToyConfig(
        horizon=options.horizon or ToyConfig.horizon, action_dim=options.action_dim or ToyConfig.action_dim
    )
    h, out = config.hidden, config.horizon * config.action_dim
    params = config.state_dim * h + (config.depth - 1) * h * h + h * out
    elem = torch.finfo(_DTYPES[options.dtype]).bits // 8
    check_fits_memory((params + options.batch * (h + out)) * elem, f"toy:{config_name}", options.device)
    torch.manual_seed(options.seed)
    model = ToyMLPPolicy(config).to(device=options.device, dtype=_DTYPES[options.dtype]).eval()
    return model, config


def build_bench(config_name: str, options: TargetOptions) -> BenchCase:
    model, config = _build(config_name, options)
    state = torch.randn(
        options.batch, config.state_dim, generator=torch.Generator().manual_seed(options.seed)
    )
    state = state.to(device=options.device, dtype=_DTYPES[options.dtype])

    @torch.inference_mode()
    def run(timer: StageTimer) -> torch.Tensor:
        return model(state, timer)

    params = sum(p.numel() for p in model.parameters())
    return BenchCase(
        name=f"toy:{config_name}",
        run=run,
        info={"parameters": params, "batch": options.batch, "dtype": options.dtype, **config.__dict__},
        device=options.device,
    )


class ToyPolicy:
    """The Policy protocol over the MLP: reads obs["state"], returns an action chunk."""

    def __init__(self, model: ToyMLPPolicy, device: str) -> None:
        self.model = model
        self.device = device

    def reset(self) -> None:
        pass

    @property
    def spec(self) -> Any:
        """A state vector in, an untrained action chunk out (no images, no meaning)."""
        from hotloop.policy_spec import PolicySpec

        cfg = self.model.config
        return PolicySpec(
            state_dim=cfg.state_dim, action_dim=cfg.action_dim, action_meaning="any", horizon=cfg.horizon
        )

    @torch.inference_mode()
    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        cfg = self.model.config
        state = np.zeros(cfg.state_dim, dtype=np.float32)
        given = np.asarray(obs["state"], dtype=np.float32).ravel()[: cfg.state_dim]
        state[: given.size] = given
        x = torch.from_numpy(state)[None].to(self.device, dtype=next(self.model.parameters()).dtype)
        return {"actions": self.model(x)[0].float().cpu().numpy()}


def build_policy(config_name: str, options: TargetOptions) -> ToyPolicy:
    model, _ = _build(config_name, options)
    return ToyPolicy(model, options.device)
