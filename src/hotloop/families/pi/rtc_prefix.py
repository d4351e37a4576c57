"""Real-time chunking by action conditioning (`--strategy rtc-prefix`, and `rtc-soft` over the soft mask).

Black, Galliker, Levine, "Training-Time Action Conditioning for Efficient Real-Time Chunking" (2025).
Guided RTC (`hotloop.realtime.rtc`) steers a plain policy at inference time through a vector-Jacobian
product, and can only move the chunk as far as the model's prediction depends on x_t. Here the policy is
trained to continue a given prefix instead (`flow_matching_loss(prefix_len=...)`, `hotloop train-demo
--action-prefix-prob`): during training the first d action tokens of the noisy chunk are replaced by the
clean actions at flow time 0 (this package's data end), every other token keeps the sample's t, and the
loss covers only the tokens from d on. At inference the d actions the robot executes while the next
chunk is inferred are given the same way, held fixed at every Euler step, and the model samples the
rest: no gradient, one forward per step.

The time reaches the model per token, t of shape (B, chunk) (`PiModel.embed_suffix`); for pi0.5 every
adaRMS norm then scales, shifts and gates each token by its own time. Only a model trained with the
augmentation continues a prefix well; any pi0 / pi0.5 model runs, and returns the prefix exactly.

This module imports torch only inside its functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Unpack

    from torch import Tensor

    from hotloop.families.pi.sampling import PiObservation, SampleOptions
    from hotloop.models.pi0 import PiModel


def prefix_token_time(t: Tensor, delay: int, batch: int, chunk: int) -> Tensor:
    """Per-token flow time (batch, chunk): 0 (clean, given) on the first `delay` tokens, `t` after."""
    import torch

    tt = t.to(torch.float32).expand(batch).clone()[:, None].repeat(1, chunk)
    tt[:, :delay] = 0.0
    return tt


def prefix_sample_actions(
    model: PiModel,
    obs: PiObservation,
    prefix: Tensor,
    delay: int,
    **options: Unpack[SampleOptions],
) -> Tensor:
    """`hotloop.families.pi.sampling.sample_actions` conditioned on a given prefix: rows [0, delay) of `prefix`
    (B, chunk, max_action_dim), model space (normalised, zero-padded), are the first actions of the
    result exactly; the rest is sampled. delay = 0 is plain sampling. `options`: noise, num_steps, generator,
    timer, cache, as `sample_actions` takes them."""
    import torch

    from hotloop.families.pi.sampling import begin_sampling

    chunk = model.cfg.chunk_size
    if not 0 <= delay <= chunk:
        raise ValueError(f"delay must be in [0, {chunk}] (got {delay})")
    timer, steps, noise, cache = begin_sampling(model, obs, options)
    given = prefix.to(device=noise.device, dtype=torch.float32)[:, :delay]
    with torch.no_grad(), timer.stage("denoise"):
        dt = torch.tensor(-1.0 / steps, dtype=torch.float32, device=noise.device)
        x = noise.to(torch.float32).clone()
        x[:, :delay] = given
        for k in range(steps):
            # The same float64-then-float32 time as `sample_actions`, so delay 0 matches it bit for bit.
            t = torch.tensor(1.0 + k * (-1.0 / steps), dtype=torch.float32, device=noise.device)
            tt = prefix_token_time(t, delay, x.shape[0], chunk) if delay else t
            v = model.denoise_step(cache, x, tt, obs.state)
            x = x + dt * v
            x[:, :delay] = given  # held: the prefix is data (t = 0) at every step
    return x


def soft_prefix_sample_actions(
    model: PiModel,
    obs: PiObservation,
    prefix: Tensor,
    weights: Tensor,
    **options: Unpack[SampleOptions],
) -> Tensor:
    """Prefix conditioning over RTC's whole soft mask (`--strategy rtc-soft`), then the mask enforced.

    Sampling: token i of the new chunk starts at flow time s_i = 1 - W_i from the previous chunk's
    action there, x_i = s_i * noise_i + (1 - s_i) * prefix_i (the flow path's own interpolation), and is
    integrated only from s_i down to 0: every Euler step is the global grid's, clipped per token,
    x_i += (min(t_{k+1}, s_i) - min(t_k, s_i)) * v_i, with the model told each token's own time. Rows
    with W = 1 (the d executed meanwhile) are held exactly, as in `prefix_sample_actions`; rows with
    W = 0 are sampled as usual.

    Then the result is W * prefix + (1 - W) * sample. A plain policy's prediction hardly depends on its
    noisy input (docs/realtime.md), so the partly denoised tail alone moves back to the new plan within a
    step or two: measured on demo:conveyor it took 11-21 % off the chunk jump, the blend 70 %. The blend
    is RTC's objective (agree with the executing chunk by W) met exactly; the conditioning keeps the
    sampled part coherent with it (plain sampling blended the same way lost 8-11 more points).
    `weights` (chunk,): W, e.g. `hotloop.realtime.rtc.prefix_weights`; all zeros is plain sampling."""
    import torch

    from hotloop.families.pi.sampling import begin_sampling

    chunk = model.cfg.chunk_size
    if weights.shape != (chunk,):
        raise ValueError(f"weights must have shape ({chunk},) (got {tuple(weights.shape)})")
    timer, steps, noise, cache = begin_sampling(model, obs, options)
    w = weights.to(device=noise.device, dtype=torch.float32).clamp(0.0, 1.0)[None, :, None]  # (1, chunk, 1)
    start = 1.0 - w
    given = prefix.to(device=noise.device, dtype=torch.float32)
    with torch.no_grad(), timer.stage("denoise"):
        x = start * noise.to(torch.float32) + w * given
        s = start[..., 0].expand(x.shape[0], chunk)  # (B, chunk)
        for k in range(steps):
            t = 1.0 + k * (-1.0 / steps)
            t_next = 1.0 + (k + 1) * (-1.0 / steps) if k + 1 < steps else 0.0
            now = torch.clamp(s, max=t)
            after = torch.clamp(s, max=t_next)
            v = model.denoise_step(cache, x, now.contiguous(), obs.state)
            x = x + (after - now)[..., None] * v
        x = w * given + start * x
    return x
