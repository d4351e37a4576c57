"""SmolVLA's model-space observation: what `predict_action_chunk` feeds the network after LeRobot's own
`prepare_images` / `prepare_state`, as one batch of fixed-shape tensors, and the checks an engine runs on it.

The prompt is held in the engine's prompt slots (the tokenizer step's `max_length`): LeRobot pads to the
longest prompt of the batch, hotloop's fixed-shape engines to `max_length`. Padding is masked out of every
attention and does not advance positions, so both give the same actions (the tests bound the difference).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.batching import select as select  # re-exported: the compression steps slice with it
from hotloop.families.inputs import check_fields, check_finite, check_kind, to_tensor
from hotloop.models.smolvla import LANG_MASK, LANG_TOKENS, STATE, fit_images, prepare_images, prepare_state
from hotloop.models.smolvla_config import SmolVLAConfig

OBS_FIELDS = ("images", "image_masks", "lang_tokens", "lang_masks", "state")
IMAGE_RANGE = (-1.0 - 1e-3, 1.0 + 1e-3)


@dataclass
class SmolVLAObservation:
    """images (B, V, 3, H, W) in [-1, 1] at the resized size (empty camera slots included); image_masks
    (B, V) bool; lang_tokens (B, L) int64 and lang_masks (B, L) bool; state (B, max_state_dim), normalised
    and zero-padded."""

    images: Tensor
    image_masks: Tensor
    lang_tokens: Tensor
    lang_masks: Tensor
    state: Tensor

    @property
    def batch(self) -> int:
        return int(self.images.shape[0])


def pad_prompt(tokens: Tensor, masks: Tensor, slots: int, pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """(B, L) tokens and masks right-padded (masked) to `slots`; ConfigError if real tokens lie beyond."""
    length = int(tokens.shape[1])
    if length > slots:
        if bool(masks[:, slots:].any()):
            raise ConfigError(
                f"the prompt has real tokens beyond the engine's {slots} prompt slots; shorten it"
            )
        return tokens[:, :slots], masks[:, :slots]
    extra = slots - length
    pad = torch.full((tokens.shape[0], extra), pad_id, dtype=tokens.dtype, device=tokens.device)
    off = torch.zeros(masks.shape[0], extra, dtype=torch.bool, device=masks.device)
    return torch.cat((tokens, pad), 1), torch.cat((masks.bool(), off), 1)


def batch_observation(
    cfg: SmolVLAConfig, batch: Mapping[str, Any], slots: int | None = None, pad_id: int = 0
) -> SmolVLAObservation:
    """A model-space LeRobot batch (what `predict_action_chunk` receives) as an observation, the prompt kept
    as the preprocessor padded it (`slots` None) or right-padded to `slots`."""
    missing = [k for k in (LANG_TOKENS, LANG_MASK, STATE) if k not in batch]
    if missing:
        raise ConfigError(f"batch lacks {missing[0]!r} (keys: {sorted(batch)})")
    images, masks = prepare_images(batch, cfg)
    state = prepare_state(torch.as_tensor(batch[STATE]), cfg)
    tokens = torch.as_tensor(batch[LANG_TOKENS]).to(torch.int64)
    lang_masks = torch.as_tensor(batch[LANG_MASK]).bool()
    if slots is not None:
        tokens, lang_masks = pad_prompt(tokens, lang_masks, slots, pad_id)
    return SmolVLAObservation(images, masks, tokens, lang_masks, state.float())


def example_observation(
    cfg: SmolVLAConfig, batch: int, slots: int, device: torch.device | str = "cpu", seed: int = 0
) -> SmolVLAObservation:
    """A deterministic observation: every camera present (empty slots masked as LeRobot masks them), every
    prompt slot filled."""
    g = torch.Generator().manual_seed(seed)
    h, w = cfg.image_size
    real = len(cfg.camera_keys)
    images = torch.rand(batch, cfg.views, cfg.vlm.vision.num_channels, h, w, generator=g) * 2 - 1
    images[:, real:] = -1.0
    masks = torch.zeros(batch, cfg.views, dtype=torch.bool)
    masks[:, :real] = True
    return SmolVLAObservation(
        images=images.to(device),
        image_masks=masks.to(device),
        lang_tokens=torch.randint(0, cfg.vlm.vocab_size, (batch, slots), generator=g).to(device),
        lang_masks=torch.ones(batch, slots, dtype=torch.bool, device=device),
        state=torch.randn(batch, cfg.max_state_dim, generator=g).to(device),
    )


def random_observation(
    cfg: SmolVLAConfig, batch: int, slots: int, seed: int, prompt_tokens: int | None = None
) -> SmolVLAObservation:
    """A seeded observation with `prompt_tokens` real tokens (default `default_prompt_tokens`) in `slots`."""
    obs = example_observation(cfg, batch, slots, seed=seed + 1)
    real = min(slots, prompt_tokens if prompt_tokens is not None else default_prompt_tokens(slots))
    obs.lang_masks[:, real:] = False
    obs.lang_tokens[:, real:] = 0
    return obs


def default_prompt_tokens(slots: int) -> int:
    """Real tokens of a benchmark prompt: 12 (a short instruction, what LeRobot's peer times) or all slots."""
    return min(12, slots)


def validate_observation(cfg: SmolVLAConfig, shape: Any, obs: Any) -> SmolVLAObservation:
    """`obs` as the engine of shape `shape` takes it, or ConfigError naming the input. A prompt of fewer slots
    is right-padded (masked) to the engine's; real tokens beyond its slots are refused."""
    fields = check_fields(obs, OBS_FIELDS, SmolVLAObservation, "SmolVLAObservation")
    h, w = cfg.image_size
    b = shape.batch
    expected: dict[str, tuple[tuple[int, ...], str]] = {
        "images": ((b, cfg.views, cfg.vlm.vision.num_channels, h, w), "float"),
        "image_masks": ((b, cfg.views), "bool"),
        "lang_tokens": ((b, -1), "int"),
        "lang_masks": ((b, -1), "bool"),
        "state": ((b, cfg.max_state_dim), "float"),
    }
    tensors: dict[str, Tensor] = {}
    for name, (want, kind) in expected.items():
        value = fields[name]
        if value is None:
            raise ConfigError(f"input {name!r} is missing; expected shape {want} ({kind})")
        t = to_tensor(name, value)
        if name == "images":  # prepared at the checkpoint's own size for a `vision-res` plan: resized
            t = fit_images(t, cfg)
        if t.ndim != len(want) or any(d not in (-1, g) for d, g in zip(want, t.shape, strict=True)):
            shown = tuple(shape.prompt_slots if d == -1 else d for d in want)
            raise ConfigError(f"input {name!r} has shape {tuple(t.shape)}; this engine takes {shown}")
        check_kind(name, t, kind)
        tensors[name] = t
    if tensors["lang_tokens"].shape != tensors["lang_masks"].shape:
        raise ConfigError(
            f"input 'lang_masks' has shape {tuple(tensors['lang_masks'].shape)}; it must match lang_tokens "
            f"{tuple(tensors['lang_tokens'].shape)}"
        )
    images = tensors["images"]
    check_finite("images", images)
    lo, hi = float(images.min()), float(images.max())
    if lo < IMAGE_RANGE[0] or hi > IMAGE_RANGE[1]:
        raise ConfigError(f"input 'images' spans [{lo:.3g}, {hi:.3g}]; expected [-1, 1] (2 x - 1 of [0, 1])")
    tokens = tensors["lang_tokens"]
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= cfg.vlm.vocab_size):
        raise ConfigError(f"input 'lang_tokens' has ids outside the vocabulary [0, {cfg.vlm.vocab_size})")
    check_finite("state", tensors["state"])
    lang, lang_masks = pad_prompt(tokens.to(torch.int64), tensors["lang_masks"], shape.prompt_slots)
    return SmolVLAObservation(images, tensors["image_masks"], lang, lang_masks, tensors["state"].float())
