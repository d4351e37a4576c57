"""Flow-matching sampling and training loss for the pi0 family, with explicit noise and stage timing.

`sample_actions` composes the three sub-engines of `PiModel` (vision -> prefix -> N denoising steps) with
the Euler integrator LeRobot and openpi use: t runs from 1 (noise) to 0 (actions) with dt = -1/N, and
each update is x <- x + dt * v with the product and the sum each rounded to float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.measure.stages import StageTimer, null_timer
from hotloop.models.pi0 import PiModel, PrefixCache


@dataclass
class PiObservation:
    """Model-space inputs (already preprocessed, padded to the config's fixed shapes).

    images (B, V, 3, H, W) in [-1, 1]; image_masks (B, V) bool; lang_tokens (B, L) int64; lang_masks
    (B, L) bool; state (B, max_state_dim) normalised and zero-padded (pi0 only; pi0.5 ignores it).
    """

    images: Tensor
    image_masks: Tensor
    lang_tokens: Tensor
    lang_masks: Tensor
    state: Tensor | None = None

    @property
    def batch(self) -> int:
        return int(self.images.shape[0])


def default_generator(seed: int = 0, device: torch.device | str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def make_noise(model: PiModel, batch: int, generator: torch.Generator | None = None) -> Tensor:
    """x at t = 1: N(0, 1) of shape (B, chunk, max_action_dim), float32, from `generator` (seed 0 if None)."""
    cfg = model.cfg
    device = model.action_in_proj.weight.device
    gen = generator if generator is not None else default_generator(0, device)
    return torch.randn(batch, cfg.chunk_size, cfg.max_action_dim, generator=gen, device=device)


@torch.no_grad()
def sample_actions(
    model: PiModel,
    obs: PiObservation,
    noise: Tensor | None = None,
    num_steps: int | None = None,
    generator: torch.Generator | None = None,
    timer: StageTimer | None = None,
    cache: PrefixCache | None = None,
) -> Tensor:
    """Integrate the flow from noise (t = 1) to an action chunk (t = 0); returns float32 (B, chunk, A).

    `noise` defaults to `make_noise(model, B, generator)`; `num_steps` to the config's. A preallocated
    `cache` (from `model.allocate_cache`) is filled in place, so repeated calls reuse its memory.
    Stages "vision", "prefix" and "denoise" are marked on `timer`.
    """
    timer = timer if timer is not None else null_timer()
    steps = num_steps if num_steps is not None else model.cfg.num_steps
    if noise is None:
        noise = make_noise(model, obs.batch, generator)
    with timer.stage("vision"):
        image_tokens = model.vision(obs.images)
    with timer.stage("prefix"):
        cache = model.prefix(image_tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks, out=cache)
    with timer.stage("denoise"):
        dt = torch.tensor(-1.0 / steps, dtype=torch.float32, device=noise.device)
        x = noise.to(torch.float32)
        for k in range(steps):
            # t = float32(1 + k * (-1/N)) computed in float64 first, exactly as the peers do; a float32
            # 1 + k * dt differs in the last bit at some steps (visible at the fixtures' 1e-5 tolerance).
            t = torch.tensor(1.0 + k * (-1.0 / steps), dtype=torch.float32, device=noise.device)
            v = model.denoise_step(cache, x, t, obs.state)
            x = x + dt * v
    return x


def sample_time(batch: int, generator: torch.Generator | None, device: torch.device | str = "cpu") -> Tensor:
    """Training times t ~ Beta(1.5, 1) * 0.999 + 0.001 (LeRobot's schedule: more weight near t = 1).

    Beta(a, 1) is sampled by inversion, t = u^(1/a), so the draw follows `generator` (torch's Beta
    distribution does not take one).
    """
    u = torch.rand(batch, generator=generator, device=device)
    return u.pow(1.0 / 1.5) * 0.999 + 0.001


def flow_matching_loss(
    model: PiModel,
    obs: PiObservation,
    actions: Tensor,
    generator: torch.Generator | None = None,
    noise: Tensor | None = None,
    time: Tensor | None = None,
    reduce: bool = True,
) -> Tensor:
    """Flow-matching MSE: x_t = t * noise + (1 - t) * actions, target u = noise - actions.

    actions (B, chunk, max_action_dim) normalised and zero-padded. `noise`/`time` default to draws from
    `generator`. Returns the mean loss, or per-element losses (B, chunk, A) with `reduce=False` (so the
    caller can mask padded action columns). Gradients flow through all three sub-engines.
    """
    b = actions.shape[0]
    device = actions.device
    if noise is None:
        noise = torch.randn(actions.shape, generator=generator, device=device)
    if time is None:
        time = sample_time(b, generator, device)
    t = time[:, None, None]
    x_t = t * noise + (1 - t) * actions
    u_t = noise - actions
    image_tokens = model.vision(obs.images)
    cache = model.prefix(image_tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks)
    # denoise_step takes one t per sample (B,) as well as a scalar.
    v_t = model.denoise_step(cache, x_t, time, obs.state)
    losses = F.mse_loss(v_t, u_t.float(), reduction="none")
    return losses.mean() if reduce else losses
