"""The eager SmolVLA sampler stage by stage (for timing), and its velocity as a function of (x, t) with
per-token times (for the RTC samplers): both the model's own operations, LeRobot's numerics."""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.families.smolvla.observation import SmolVLAObservation
from hotloop.families.smolvla.rtc import Velocity
from hotloop.measure.stages import StageTimer, null_timer
from hotloop.models.smolvla import SmolVLAModel, check_inputs, euler, sincos_time


def embed_suffix_tokens(model: SmolVLAModel, x_t: Tensor, t: Tensor) -> Tensor:
    """`SmolVLAModel.embed_suffix` with one time per chunk token (B, chunk); for equal times the same
    values as the model's broadcast embedding."""
    cfg = model.cfg
    action = model.action_in_proj(x_t.to(model.dtype))
    temb = sincos_time(t.to(torch.float32), cfg.expert.width, cfg.min_period, cfg.max_period)
    joint = torch.cat((action, temb.to(action.dtype)), dim=2)
    return cast(Tensor, model.action_time_mlp_out(F.silu(model.action_time_mlp_in(joint))))


def eager_velocity(model: SmolVLAModel, k: Tensor, v: Tensor, pad: Tensor) -> Velocity:
    """v(x, t) over one prefix cache: the model's denoise_step for times (B,), per token for (B, chunk)."""

    def velocity(x: Tensor, t: Tensor) -> Tensor:
        if t.ndim == 1:
            return model.denoise_step(k, v, pad, x, t)
        out = model.expert_pass(k, v, pad.bool(), embed_suffix_tokens(model, x, t))[
            :, -model.cfg.chunk_size :
        ]
        return cast(Tensor, model.action_out_proj(out.to(model.action_out_proj.weight.dtype))).float()

    return velocity


@torch.no_grad()
def encode(
    model: SmolVLAModel, obs: SmolVLAObservation, timer: StageTimer | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """vision then prefix: (k, v, prefix pad mask)."""
    timer = timer if timer is not None else null_timer()
    with timer.stage("vision"):
        tokens = model.vision(obs.images)
    with timer.stage("prefix"):
        return model.prefix(tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks, obs.state)


@torch.no_grad()
def sample_actions(
    model: SmolVLAModel,
    obs: SmolVLAObservation,
    noise: Tensor,
    num_steps: int | None = None,
    timer: StageTimer | None = None,
    validate: bool = True,
) -> Tensor:
    """`hotloop.models.smolvla.sample_actions` (LeRobot's Euler loop, bit for bit) with stage timing."""
    if validate:
        check_inputs(
            model, obs.images, obs.image_masks, obs.lang_tokens, obs.lang_masks, obs.state, noise, num_steps
        )
    timer = timer if timer is not None else null_timer()
    k, v, pad = encode(model, obs, timer)
    with timer.stage("denoise"):
        return euler(model, k, v, pad, noise, num_steps if num_steps is not None else model.cfg.num_steps)
