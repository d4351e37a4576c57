"""The eager reference sampler and the family's noise draw, below both the family class and the policy
wrapper (which each use them): LeRobot's `generate_actions` without its n_action_steps slice."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def sample_actions(model: Any, obs: Any, noise: Tensor, num_steps: int | None = None) -> Tensor:
    """Encode the history, then the config's scheduler stepped by `scheduler.step` (diffusers'
    expressions), x_T and the per-step variance noise from `noise` (B, >= 1 + N, horizon, A)."""
    from hotloop.families.diffusion.engines import split_noise
    from hotloop.models.diffusion import needs_step_noise
    from hotloop.models.diffusion import sample_actions as sample

    cfg = model.cfg
    steps = num_steps or cfg.num_inference_steps
    scheduler = cfg.make_scheduler()
    start, step_noise = split_noise(noise, steps)
    with torch.no_grad():
        d = next(model.parameters()).dtype
        gc = model.encode(
            None if obs.images is None else obs.images.to(d),
            obs.state.to(d),
            None if obs.env_state is None else obs.env_state.to(d),
        )
        out = sample(
            model,
            scheduler,
            gc,
            start.to(d),
            steps,
            step_noise.to(d) if needs_step_noise(scheduler) else None,
        )
    return out.float()


def make_noise(cfg: Any, num_steps: int, batch: int, generator: torch.Generator | None) -> Tensor:
    """N(0, 1) x_T and per-step variance noise (B, 1 + N, horizon, A), zeros on the steps the scheduler
    adds none (DDPM at t = 0; every DDIM step at eta 0); seed 0 when `generator` is None."""
    from hotloop.families.diffusion.engines import drawn_rows

    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    noise = torch.randn((batch, 1 + num_steps, cfg.horizon, cfg.action_dim), generator=gen)
    noise[:, 1:][:, ~drawn_rows(cfg, num_steps)] = 0.0
    return noise
