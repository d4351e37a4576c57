"""A reference run's model-space inputs (docs/verify.md) as a `DiffusionObservation` and the family's noise.

`inputs.npz` holds LeRobot's batch after the preprocessor: `observation.state` (B, O, S), one array per
camera key (B, O, 3, H, W) in the config's camera order, `observation.environment_state` (B, O, E); the
noise is `noise.npy` (B, horizon, A), x_T, and `step_noise.npy` (N, B, horizon, A), DDPM's variance noise
per step. Every array that does not fit the checkpoint is refused naming the file and the key.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError

STATE, ENV_STATE = "observation.state", "observation.environment_state"


def _array(inputs: dict[str, np.ndarray], key: str, want: tuple[int, ...], where: str) -> torch.Tensor:
    if key not in inputs:
        raise ConfigError(f"{where}: key {key!r} is missing; the checkpoint reads it (shape {want})")
    value = inputs[key]
    if value.dtype.kind != "f":
        raise ConfigError(f"{where}: key {key!r} has dtype {value.dtype}; the model takes floats")
    if tuple(value.shape[1:]) != want[1:] or value.ndim != len(want):
        raise ConfigError(
            f"{where}: key {key!r} has shape {tuple(value.shape)}; this checkpoint takes {('B', *want[1:])}"
        )
    return torch.from_numpy(np.ascontiguousarray(value)).float()


def reference_observation(cfg: Any, inputs: dict[str, np.ndarray], where: str) -> Any:
    from hotloop.families.diffusion.engines import DiffusionObservation

    o = cfg.n_obs_steps
    state = _array(inputs, STATE, (-1, o, cfg.state_dim), where)
    b = int(state.shape[0])
    images = None
    if cfg.n_cameras:
        cams = [_array(inputs, k, (b, o, *cfg.image_shape), where) for k in cfg.camera_keys]
        images = torch.stack(cams, dim=2)  # LeRobot: torch.stack([batch[key] ...], dim=-4)
    env = _array(inputs, ENV_STATE, (b, o, cfg.env_state_dim), where) if cfg.env_state_dim else None
    for key, t in ((STATE, state), *((k, images) for k in cfg.camera_keys[:1]), (ENV_STATE, env)):
        if t is not None and int(t.shape[0]) != b:
            raise ConfigError(f"{where}: key {key!r} holds {int(t.shape[0])} samples; {STATE!r} {b}")
    return DiffusionObservation(state, images, env)


def reference_noise(cfg: Any, reference: Any, batch: int) -> torch.Tensor:
    """The family's noise (B, 1 + N, horizon, A) from noise.npy and step_noise.npy (required where the
    config's scheduler adds noise: DDPM)."""
    from hotloop.families.diffusion.engines import join_noise
    from hotloop.models.diffusion import needs_step_noise

    steps = cfg.num_inference_steps
    start = reference.array("noise.npy")
    if start is None:
        raise ConfigError(f"{reference.folder}: noise.npy is missing (the sampler's starting noise x_T)")
    want = (batch, cfg.horizon, cfg.action_dim)
    if tuple(start.shape) != want:
        raise ConfigError(
            f"{reference.where('noise.npy')}: the array has shape {tuple(start.shape)}; this checkpoint "
            f"takes {want} (batch, horizon, action dim)"
        )
    step = reference.array("step_noise.npy")
    if not needs_step_noise(cfg.make_scheduler()):
        step = None  # DDIM at eta 0 adds no noise: a step_noise.npy beside it is not read
    elif step is None:
        raise ConfigError(
            f"{reference.folder}: step_noise.npy is missing; {cfg.noise_scheduler_type} adds variance "
            f"noise at every step ({steps}, {batch}, {cfg.horizon}, {cfg.action_dim})"
        )
    elif tuple(step.shape[1:]) == want and int(step.shape[0]) != steps:
        raise ConfigError(
            f"{reference.where('step_noise.npy')}: the array holds {int(step.shape[0])} steps' noise; this "
            f"checkpoint runs {steps} {cfg.noise_scheduler_type} steps (a reference made with other settings)"
        )
    elif tuple(step.shape) != (steps, *want):
        raise ConfigError(
            f"{reference.where('step_noise.npy')}: the array has shape {tuple(step.shape)}; this "
            f"checkpoint takes {(steps, *want)} (steps, batch, horizon, action dim)"
        )
    step_t = torch.from_numpy(np.ascontiguousarray(step)).float() if step is not None else None
    return join_noise(torch.from_numpy(np.ascontiguousarray(start)).float(), step_t, steps)


def reference_inputs(cfg: Any, inputs: dict[str, np.ndarray], reference: Any) -> tuple[Any, torch.Tensor]:
    obs = reference_observation(cfg, inputs, reference.where("inputs.npz"))
    return obs, reference_noise(cfg, reference, int(obs.state.shape[0]))
