"""pi's guided RTC sampler (`hotloop.realtime.rtc`, Algorithm 1 of Black, Galliker, Levine 2025): the
flow integrated with a vector-Jacobian-product correction toward the previous chunk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hotloop.realtime.rtc import guidance_weight

if TYPE_CHECKING:
    from typing import Unpack

    from torch import Tensor

    from hotloop.families.pi.sampling import PiObservation, SampleOptions
    from hotloop.models.pi0 import PiModel


def guided_sample_actions(
    model: PiModel,
    obs: PiObservation,
    prev: Tensor,
    weights: Tensor,
    max_guidance_weight: float,
    **options: Unpack[SampleOptions],
) -> Tensor:
    """`hotloop.families.pi.sampling.sample_actions` with RTC guidance. `prev` (B, chunk, max_action_dim): the
    previous chunk's actions in model space (normalized, zero-padded; rows past the overlap are
    ignored); `weights` (chunk,) or (chunk, max_action_dim): the soft mask from `prefix_weights`.
    `options`: noise, num_steps, generator, timer, cache, as `sample_actions` takes them."""
    import torch

    from hotloop.families.pi.sampling import begin_sampling

    timer, steps, noise, cache = begin_sampling(model, obs, options)
    mask = weights.to(device=noise.device, dtype=torch.float32)
    mask = mask[None] if mask.ndim == 2 else mask[None, :, None]
    target = prev.to(device=noise.device, dtype=torch.float32)
    with timer.stage("denoise"):
        dt = torch.tensor(-1.0 / steps, dtype=torch.float32, device=noise.device)
        x = noise.to(torch.float32)
        for k in range(steps):
            t_value = 1.0 + k * (-1.0 / steps)
            t = torch.tensor(t_value, dtype=torch.float32, device=noise.device)
            with torch.enable_grad():
                x_in = x.detach().requires_grad_(True)
                v = model.denoise_step(cache, x_in, t, obs.state)
                x0 = x_in - t * v
                (g,) = torch.autograd.grad(x0, x_in, grad_outputs=(target - x0.detach()) * mask)
            w = guidance_weight(t_value, max_guidance_weight)
            x = (x + dt * (v.detach() - w * g)).detach()
    return x
