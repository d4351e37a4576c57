"""`toy:mlp` as a bench, policy, compile source and data target (seeded random weights)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError
from hotloop.families.frames import DataLimits, TargetAdapter
from hotloop.families.protocol import PolicySource
from hotloop.families.toy.family import ToyFamily
from hotloop.families.toy.policy import ToyObservation, ToyPolicy, toy_spec
from hotloop.measure.stages import StageTimer
from hotloop.models.toy import ToyConfig, ToyMLPPolicy
from hotloop.targets import BenchCase, TargetOptions, check_fits_memory

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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


def build_policy(config_name: str, options: TargetOptions) -> ToyPolicy:
    model, _ = _build(config_name, options)
    return ToyPolicy(model, options.device)


def build_source(config_name: str, options: TargetOptions) -> PolicySource:
    """The fp32 MLP, one random state and the policy description an artifact stores."""
    if options.dtype != "float32":
        raise ConfigError("--dtype: a compile source is the fp32 model (the planner tries the precisions)")
    model, config = _build(config_name, options)
    family = ToyFamily()
    shape = family.default_shape(config)
    obs = family.random_observation(config, shape, options.seed)
    noise = family.make_noise(config, shape, 1, torch.Generator().manual_seed(options.seed))
    policy = {"kind": f"toy:{config_name}", "seed": options.seed, "spec": toy_spec(config).to_dict()}
    return PolicySource(f"toy:{config_name}", family, model.float(), shape, obs, noise, policy)


def build_data(
    config_name: str, dataset: Any, options: TargetOptions, model: Any = None
) -> tuple[Any, TargetAdapter]:
    """Recorded frames as toy observations: the state zero-padded to state_dim, the next `horizon`
    actions (the last repeated) as targets, zero-padded to action_dim."""
    if model is None:
        model, _ = _build(config_name, options)
    cfg: ToyConfig = model.config

    def observe(images: dict[str, np.ndarray], state: np.ndarray, task_index: int) -> ToyObservation:  # noqa: ARG001
        padded = np.zeros(cfg.state_dim, dtype=np.float32)
        padded[: min(cfg.state_dim, state.shape[-1])] = state[: cfg.state_dim]
        return ToyObservation(torch.from_numpy(padded)[None])

    def targets(chunk: np.ndarray, state: np.ndarray) -> np.ndarray:
        out = np.zeros((cfg.horizon, cfg.action_dim), dtype=np.float32)
        h = min(cfg.horizon, chunk.shape[0])
        out[:h, : chunk.shape[1]] = chunk[:h]
        if h < cfg.horizon:
            out[h:, : chunk.shape[1]] = chunk[h - 1]
        return out

    limits = DataLimits(cfg.state_dim, cfg.action_dim, 0, cfg.horizon)
    return model, TargetAdapter(
        f"toy:{config_name}", observe, targets, None, None, None, None, limits, ToyFamily()
    )
