"""Flow-matching sampling and training loss for the pi0 family, with explicit noise and stage timing.

`sample_actions` composes the three sub-engines of `PiModel` (vision -> prefix -> N denoising steps) with
the Euler integrator LeRobot and openpi use: t runs from 1 (noise) to 0 (actions) with dt = -1/N, and
each update is x <- x + dt * v with the product and the sum each rounded to float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor

from hotloop.errors import ConfigError
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


def sampling_defaults(
    model: PiModel,
    obs: PiObservation,
    noise: Tensor | None,
    num_steps: int | None,
    generator: torch.Generator | None,
    timer: StageTimer | None,
) -> tuple[StageTimer, int, Tensor]:
    """(timer, steps, noise) with the samplers' defaults: no timing, the config's steps, fresh noise."""
    steps = num_steps if num_steps is not None else model.cfg.num_steps
    noise = noise if noise is not None else make_noise(model, obs.batch, generator)
    return (timer if timer is not None else null_timer()), steps, noise


def check_inputs(
    model: PiModel,
    obs: PiObservation,
    noise: Tensor | None = None,
    num_steps: int | None = None,
    cache: PrefixCache | None = None,
) -> None:
    """Raise ConfigError naming the first input that does not fit `model`'s fixed shapes.

    Cheap on purpose (it sits on the hot path): shapes and dtypes are metadata; the only data read is one
    min/max of the images and of the token ids, gathered in a single device sync.
    """
    cfg = model.cfg
    if num_steps is not None and (
        isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1
    ):
        raise ConfigError(f"num_steps must be a positive integer (got {num_steps!r}); the peers use 10")
    if not isinstance(obs, PiObservation):
        raise ConfigError(f"obs must be a PiObservation (got {type(obs).__name__})")
    images, tokens = obs.images, obs.lang_tokens
    size = cfg.image_side
    want = f"(B, {cfg.views}, 3, {size}, {size})"
    if not isinstance(images, Tensor) or images.ndim != 5:
        got = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ConfigError(f"obs.images must be a tensor {want}; got {got}")
    b = images.shape[0]
    if tuple(images.shape[1:]) != (cfg.views, 3, size, size):
        raise ConfigError(
            f"obs.images has shape {tuple(images.shape)}; the model takes {want}: resize to {size} px and "
            f"pad absent views (image_masks False) to exactly {cfg.views}"
        )
    if not images.is_floating_point():
        raise ConfigError(
            f"obs.images is {str(images.dtype).removeprefix('torch.')}; the model takes floats in [-1, 1] "
            "(map 0-255 pixels with x / 127.5 - 1)"
        )
    _check(obs.image_masks, "obs.image_masks", (b, cfg.views), torch.bool)
    if not isinstance(tokens, Tensor) or tokens.ndim != 2:
        raise ConfigError(f"obs.lang_tokens must be a tensor (B, {cfg.max_token_len}) of token ids")
    if tokens.is_floating_point() or tokens.dtype == torch.bool or tokens.is_complex():
        raise ConfigError(
            f"obs.lang_tokens is {str(tokens.dtype).removeprefix('torch.')}; token ids are integers (int64)"
        )
    if tokens.shape[1] > cfg.max_token_len:
        raise ConfigError(
            f"obs.lang_tokens has {tokens.shape[1]} tokens; the model takes at most max_token_len "
            f"{cfg.max_token_len}: shorten the prompt"
        )
    if tuple(tokens.shape) != (b, cfg.max_token_len):
        raise ConfigError(
            f"obs.lang_tokens has shape {tuple(tokens.shape)}; expected {(b, cfg.max_token_len)}: pad shorter "
            "prompts to max_token_len with lang_masks False"
        )
    _check(obs.lang_masks, "obs.lang_masks", (b, cfg.max_token_len), torch.bool)
    if not cfg.pi05 or obs.state is not None:
        if obs.state is None:
            raise ConfigError(f"pi0 needs obs.state (B, {cfg.max_state_dim}): normalised, zero-padded")
        _check(obs.state, "obs.state", (b, cfg.max_state_dim), None, "zero-pad the normalised state")
    if noise is not None:
        _check(noise, "noise", (b, cfg.chunk_size, cfg.max_action_dim), None)
    if cache is not None and tuple(cache.pad_mask.shape) != (b, cfg.prefix_len):
        raise ConfigError(
            f"cache was allocated for batch {cache.pad_mask.shape[0]}, prefix {cache.pad_mask.shape[1]}; the "
            f"inputs need batch {b}, prefix {cfg.prefix_len}: model.allocate_cache({b})"
        )
    device = model.action_in_proj.weight.device
    if images.device != device or tokens.device != device:
        raise ConfigError(
            f"obs is on {images.device}, the model on {device}: move the inputs with .to({device})"
        )
    lo, hi, tmin, tmax = _ranges(images, tokens)
    if not (lo >= -1.001 and hi <= 1.001):  # also catches NaN
        hint = " (0-255 pixels? map them with x / 127.5 - 1)" if hi > 1.5 else ""
        raise ConfigError(f"obs.images must lie in [-1, 1]; found values in [{lo:g}, {hi:g}]{hint}")
    if tmin < 0 or tmax >= cfg.vocab_size:
        raise ConfigError(
            f"obs.lang_tokens holds ids in [{int(tmin)}, {int(tmax)}]; the vocabulary is [0, {cfg.vocab_size})"
        )


def _ranges(images: Tensor, tokens: Tensor) -> list[float]:
    """[image min, image max, token min, token max] with one host sync (ids < 2**24 are exact in float32)."""
    img = torch.aminmax(images.detach().float())
    tok = torch.aminmax(tokens.detach())
    return torch.stack((img.min, img.max, tok.min.float(), tok.max.float())).tolist()  # type: ignore[no-any-return]


def _check(x: object, name: str, shape: tuple[int, ...], dtype: torch.dtype | None, fix: str = "") -> None:
    if not isinstance(x, Tensor):
        raise ConfigError(f"{name} must be a tensor of shape {shape} (got {type(x).__name__})")
    if tuple(x.shape) != shape:
        raise ConfigError(
            f"{name} has shape {tuple(x.shape)}; expected {shape}" + (f": {fix}" if fix else "")
        )
    if dtype is not None and x.dtype != dtype:
        raise ConfigError(f"{name} must be {str(dtype).removeprefix('torch.')} (got {x.dtype})")
    if dtype is None and not x.is_floating_point():
        raise ConfigError(f"{name} must be a float tensor (got {str(x.dtype).removeprefix('torch.')})")


def encode_observation(
    model: PiModel, obs: PiObservation, timer: StageTimer, cache: PrefixCache | None
) -> PrefixCache:
    """The vision and prefix stages every sampler runs once per observation (timed as such): the
    prefix's KV cache, written into `cache` when one is given."""
    with timer.stage("vision"):
        image_tokens = model.vision(obs.images)
    with timer.stage("prefix"):
        return model.prefix(image_tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks, out=cache)


class SampleOptions(TypedDict, total=False):
    """The optional inputs the RTC samplers (`hotloop.families.pi.rtc`, `rtc_prefix`) take as keywords, as
    `sample_actions` does: the start noise, the step count, the noise generator, a stage timer and a
    preallocated prefix cache; `encoded`: that cache already holds this observation's prefix (`--strategy
    draft` computed it for its check), so vision and prefix do not run again."""

    noise: Tensor | None
    num_steps: int | None
    generator: torch.Generator | None
    timer: StageTimer | None
    cache: PrefixCache | None
    encoded: bool


def begin_sampling(
    model: PiModel, obs: PiObservation, options: SampleOptions
) -> tuple[StageTimer, int, Tensor, PrefixCache]:
    """(timer, steps, noise, cache): `options` with the samplers' defaults (`sampling_defaults`), then the
    observation encoded once without gradient (`encode_observation`) unless `options` says it already is."""
    timer, steps, noise = sampling_defaults(
        model,
        obs,
        options.get("noise"),
        options.get("num_steps"),
        options.get("generator"),
        options.get("timer"),
    )
    cache = options.get("cache")
    if options.get("encoded"):
        if cache is None:
            raise ValueError("encoded=True needs the filled cache")
        return timer, steps, noise, cache
    with torch.no_grad():
        cache = encode_observation(model, obs, timer, cache)
    return timer, steps, noise, cache


@torch.no_grad()
def sample_actions(
    model: PiModel,
    obs: PiObservation,
    noise: Tensor | None = None,
    num_steps: int | None = None,
    generator: torch.Generator | None = None,
    timer: StageTimer | None = None,
    cache: PrefixCache | None = None,
    validate: bool = True,
) -> Tensor:
    """Integrate the flow from noise (t = 1) to an action chunk (t = 0); returns float32 (B, chunk, A).

    `noise` defaults to `make_noise(model, B, generator)`; `num_steps` to the config's. A preallocated
    `cache` (from `model.allocate_cache`) is filled in place, so repeated calls reuse its memory.
    Stages "vision", "prefix" and "denoise" are marked on `timer`. The inputs are checked first
    (`check_inputs`, one min/max); `validate=False` skips that for callers that built them already (a
    compiled engine, a bench loop whose inputs were checked once).
    """
    if validate:
        check_inputs(model, obs, noise, num_steps, cache)
    timer, steps, noise = sampling_defaults(model, obs, noise, num_steps, generator, timer)
    cache = encode_observation(model, obs, timer, cache)
    with timer.stage("denoise"):
        return denoise(model, cache, obs.state, noise, steps)


@torch.no_grad()
def denoise(model: PiModel, cache: PrefixCache, state: Tensor | None, noise: Tensor, steps: int) -> Tensor:
    """The Euler loop of `sample_actions` on an encoded prefix `cache`: `steps` steps of `model`'s
    velocity from `noise` (t = 1) to the chunk (t = 0). A model whose vision and VLM are another's (a
    one-step student, `hotloop.families.pi.draft_student`) runs it on that one's cache."""
    dt = torch.tensor(-1.0 / steps, dtype=torch.float32, device=noise.device)
    x = noise.to(torch.float32)
    for k in range(steps):
        # t = float32(1 + k * (-1/N)) computed in float64 first, exactly as the peers do; a float32
        # 1 + k * dt differs in the last bit at some steps (visible at the fixtures' 1e-5 tolerance).
        t = torch.tensor(1.0 + k * (-1.0 / steps), dtype=torch.float32, device=noise.device)
        v = model.denoise_step(cache, x, t, state)
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
    prefix_len: Tensor | None = None,
) -> Tensor:
    """Flow-matching MSE: x_t = t * noise + (1 - t) * actions, target u = noise - actions.

    actions (B, chunk, max_action_dim) normalised and zero-padded. `noise`/`time` default to draws from
    `generator`. Returns the mean loss, or per-element losses (B, chunk, A) with `reduce=False` (so the
    caller can mask padded action columns). Gradients flow through all three sub-engines.

    `prefix_len` (B,) int, training-time action conditioning (Black, Galliker, Levine 2025): the first
    d = prefix_len[b] action tokens of sample b are given clean, at flow time 0 (this module's data end),
    and the model learns to continue them; their losses are 0 (masked out, so with `reduce` the mean is
    over the other tokens) and no gradient reaches the model through them.
    """
    b = actions.shape[0]
    device = actions.device
    if noise is None:
        noise = torch.randn(actions.shape, generator=generator, device=device)
    if time is None:
        time = sample_time(b, generator, device)
    token_time: Tensor = time
    keep: Tensor | None = None
    if prefix_len is not None:
        keep = torch.arange(actions.shape[1], device=device)[None, :] >= prefix_len.to(device)[:, None]
        token_time = torch.where(keep, time[:, None].float(), torch.zeros((), device=device))
        t = token_time[:, :, None]
    else:
        t = time[:, None, None]
    x_t = t * noise + (1 - t) * actions
    u_t = noise - actions
    image_tokens = model.vision(obs.images)
    cache = model.prefix(image_tokens, obs.image_masks, obs.lang_tokens, obs.lang_masks)
    # denoise_step takes one t per sample (B,), one per action token (B, chunk), or a scalar.
    v_t = model.denoise_step(cache, x_t, token_time, obs.state)
    losses = F.mse_loss(v_t, u_t.float(), reduction="none")
    if keep is None:
        return losses.mean() if reduce else losses
    weights = keep[:, :, None].to(losses.dtype)
    losses = losses * weights
    if not reduce:
        return losses
    return losses.sum() / (weights.sum() * losses.shape[-1]).clamp_min(1.0)
