"""Real-time chunking for SmolVLA, over any velocity function (the eager model's or a compiled step engine's).

Three samplers, picked by the observation's `rtc_mode` (`hotloop.realtime.rtc`):

- "guided": LeRobot's own SmolVLA RTC (`policies/rtc/modeling_rtc.py` `RTCProcessor.denoise_step` inside
  `euler_integrate`, commit 7427f318), with its inputs: the previous chunk's unexecuted actions in model
  space (`prev_chunk_left_over`, zero-padded to (chunk, max_action_dim)), `inference_delay` d and an
  `execution_horizon`, weighted by its `prefix_attention_schedule` (LINEAR by default) and its guidance
  weight min(beta, ((1-tau)^2 + tau^2) / (tau (1-tau))) at tau = 1 - t. LeRobot computes v_t before it marks
  x_t as requiring grad, so its "vector-Jacobian product" is the identity: the correction is the weighted
  error itself, v <- v - w * W * (prev - (x - t v)), one forward per step and no backward. That is what is
  reproduced here, so a compiled step engine runs it too.
- "prefix": the first d actions given as clean (time 0) tokens and held at every step (LeRobot's
  `euler_integrate(hard_prefix=...)`, hotloop's `rtc-prefix`), every other token at the step's time.
- "soft-prefix": hotloop's `rtc-soft` (`hotloop.families.pi.rtc_prefix.soft_prefix_sample_actions`) on
  SmolVLA: token i starts at flow time 1 - W_i from the previous action, is integrated only from there, and
  the result is blended by W.

The time reaches the network per token (B, chunk) in the prefix modes: SmolVLA's time embedding is applied
per chunk token anyway, so a per-token time is the same computation with other values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.models.checkpoint_meta import Fields
from hotloop.models.smolvlm_config import refuse

Velocity = Callable[[Tensor, Tensor], Tensor]  # (x (B, chunk, A) f32, t f32 (B,) or (B, chunk)) -> v
SCHEDULES = ("ZEROS", "ONES", "LINEAR", "EXP")


@dataclass(frozen=True)
class RTCSettings:
    """LeRobot's RTCConfig fields the guided sampler reads (its defaults at 7427f318)."""

    prefix_attention_schedule: str = "LINEAR"
    execution_horizon: int = 10
    max_guidance_weight: float = 10.0

    def __post_init__(self) -> None:
        if self.prefix_attention_schedule not in SCHEDULES:
            raise ConfigError(
                f"rtc prefix_attention_schedule {self.prefix_attention_schedule!r}: use one of {', '.join(SCHEDULES)}"
            )


def read_rtc_settings(config: Fields) -> RTCSettings:
    """config.json's `rtc_config` (null: LeRobot's RTCConfig defaults); a mode hotloop cannot run is refused."""
    if config.data.get("rtc_config") is None:
        return RTCSettings()
    rtc = config.obj("rtc_config")
    if rtc is None:
        return RTCSettings()
    mode = rtc.string("mode") or "guided"
    if mode != "guided":
        raise refuse(rtc, "mode", mode, "SmolVLA runs LeRobot's 'guided' RTC")
    schedule = rtc.string("prefix_attention_schedule") or "LINEAR"
    if schedule not in SCHEDULES:
        raise refuse(rtc, "prefix_attention_schedule", schedule, f"LeRobot's are {', '.join(SCHEDULES)}")
    horizon = rtc.integer("execution_horizon", minimum=0)
    beta = rtc.number("max_guidance_weight")
    return RTCSettings(
        schedule,
        10 if horizon is None else horizon,
        10.0 if beta is None else float(beta),
    )


# ---- LeRobot's RTCProcessor arithmetic ----------------------------------------------------------------


def lerobot_prefix_weights(start: int, end: int, total: int, schedule: str = "LINEAR") -> Tensor:
    """RTCProcessor.get_prefix_weights(start=d, end=execution horizon, total=chunk) (float32, (total,))."""
    start = min(start, end)
    if schedule == "ZEROS":
        w = torch.zeros(total)
        w[:start] = 1.0
        return w
    if schedule == "ONES":
        w = torch.ones(total)
        w[end:] = 0.0
        return w
    steps = total - max(total - end, 0) - start
    lin = torch.tensor([]) if end <= start or steps <= 0 else torch.linspace(1, 0, steps + 2)[1:-1]
    if schedule == "EXP":
        lin = lin * torch.expm1(lin).div(math.e - 1)
    if total - end > 0:
        lin = torch.cat([lin, torch.zeros(total - end)])
    if min(start, total) > 0:
        lin = torch.cat([torch.ones(min(start, total)), lin])
    return lin


def lerobot_guidance_weight(time: float, max_guidance_weight: float) -> Tensor:
    """RTCProcessor's clipped guidance weight at flow time `time` (LeRobot's tau = 1 - time), float32."""
    beta = torch.as_tensor(max_guidance_weight)
    tau = torch.as_tensor(1 - time)
    squared_one_minus_tau = (1 - tau) ** 2
    inv_r2 = (squared_one_minus_tau + tau**2) / squared_one_minus_tau
    c = torch.nan_to_num((1 - tau) / tau, posinf=float(beta))
    weight = torch.nan_to_num(c * inv_r2, posinf=float(beta))
    return torch.minimum(weight, beta)


def left_over(prev: Tensor, chunk: int, action_dim: int) -> Tensor:
    """prev_chunk_left_over (B, n, a) zero-padded to (B, chunk, action_dim), as RTCProcessor pads it."""
    if prev.shape[1] >= chunk and prev.shape[2] >= action_dim:
        return prev[:, :chunk, :action_dim]
    out = torch.zeros(prev.shape[0], chunk, action_dim, dtype=prev.dtype, device=prev.device)
    n, a = min(prev.shape[1], chunk), min(prev.shape[2], action_dim)
    out[:, :n, :a] = prev[:, :n, :a]
    return out


# ---- the samplers ---------------------------------------------------------------------------------------


def guided_sample(
    velocity: Velocity,
    noise: Tensor,
    prev: Tensor,
    inference_delay: int,
    settings: RTCSettings,
    num_steps: int,
    max_guidance_weight: float | None = None,
) -> Tensor:
    """LeRobot's euler_integrate with RTC guidance enabled. `prev` (B, n, a): the unexecuted actions of the
    previous chunk in model space (n rows, a <= max_action_dim columns)."""
    b, chunk, dim = noise.shape
    beta = settings.max_guidance_weight if max_guidance_weight is None else max_guidance_weight
    horizon = min(settings.execution_horizon, prev.shape[1], chunk)
    weights = lerobot_prefix_weights(inference_delay, horizon, chunk, settings.prefix_attention_schedule)
    weights = weights.to(noise.device)[None, :, None]
    target = left_over(prev.to(device=noise.device, dtype=torch.float32), chunk, dim)
    dt = -1.0 / num_steps
    x = noise.to(torch.float32)
    for step in range(num_steps):
        time = 1.0 + step * dt
        t = torch.tensor(time, dtype=torch.float32, device=noise.device).expand(b)
        v = velocity(x, t)
        x1 = x - time * v
        correction = (target - x1) * weights  # d x1 / d x_t is the identity in LeRobot's graph
        v = v - lerobot_guidance_weight(time, beta).to(noise.device) * correction
        x = x + dt * v
    return x


def prefix_sample(velocity: Velocity, noise: Tensor, prefix: Tensor, delay: int, num_steps: int) -> Tensor:
    """Rows [0, delay) of `prefix` (B, chunk, A) given as clean actions (time 0, held after every step); the
    rest sampled. delay 0 is plain sampling, bit for bit."""
    b, chunk, _ = noise.shape
    if not 0 <= delay <= chunk:
        raise ConfigError(f"rtc delay must be in [0, {chunk}] (got {delay})")
    given = prefix.to(device=noise.device, dtype=torch.float32)[:, :delay]
    dt = -1.0 / num_steps
    x = noise.to(torch.float32).clone()
    x[:, :delay] = given
    for k in range(num_steps):
        t = torch.tensor(1.0 + k * dt, dtype=torch.float32, device=noise.device).expand(b)
        if delay:
            t = t[:, None].repeat(1, chunk)
            t[:, :delay] = 0.0
        x = x + dt * velocity(x, t)
        x[:, :delay] = given
    return x


def soft_prefix_sample(
    velocity: Velocity, noise: Tensor, prefix: Tensor, weights: Tensor, num_steps: int
) -> Tensor:
    """Token i starts at flow time s_i = 1 - W_i at s_i * noise + (1 - s_i) * prefix, is integrated only
    from s_i (each global Euler step clipped per token), then the result is W * prefix + (1 - W) * sample."""
    b, chunk, _ = noise.shape
    if tuple(weights.shape) != (chunk,):
        raise ConfigError(f"rtc weights must have shape ({chunk},) (got {tuple(weights.shape)})")
    w = weights.to(device=noise.device, dtype=torch.float32).clamp(0.0, 1.0)[None, :, None]
    start = 1.0 - w
    given = prefix.to(device=noise.device, dtype=torch.float32)
    x = start * noise.to(torch.float32) + w * given
    s = start[..., 0].expand(b, chunk)
    for k in range(num_steps):
        t = 1.0 + k * (-1.0 / num_steps)
        t_next = 1.0 + (k + 1) * (-1.0 / num_steps) if k + 1 < num_steps else 0.0
        now = torch.clamp(s, max=t)
        after = torch.clamp(s, max=t_next)
        x = x + (after - now)[..., None] * velocity(x, now.contiguous())
    return w * given + start * x
