"""What a pi artifact's engine takes from a caller: a `PiObservation` or a dict of its fields, checked
by name (shapes, kinds, value ranges, NaN/Inf) before any runner sees it."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.inputs import check_fields, check_finite, check_kind, to_tensor
from hotloop.families.pi.sampling import PiObservation

OBS_FIELDS = ("images", "image_masks", "lang_tokens", "lang_masks", "state")
IMAGE_RANGE = (-1.0 - 1e-3, 1.0 + 1e-3)


def validate_observation(cfg: Any, s: Any, obs: Any) -> PiObservation:
    """`obs` as the engine of config `cfg` and shape `s` takes it, or ConfigError naming the input."""
    fields = check_fields(obs, OBS_FIELDS, PiObservation, "PiObservation")
    size = cfg.image_side
    expected: dict[str, tuple[tuple[int, ...], str]] = {
        "images": ((s.batch, s.views, 3, size, size), "float"),
        "image_masks": ((s.batch, s.views), "bool"),
        "lang_tokens": ((s.batch, cfg.max_token_len), "int"),
        "lang_masks": ((s.batch, cfg.max_token_len), "bool"),
        "state": ((s.batch, cfg.max_state_dim), "float"),
    }
    tensors: dict[str, Tensor | None] = {}
    for name, (shape, kind) in expected.items():
        value = fields[name]
        if value is None:
            if name == "state" and cfg.pi05:
                tensors[name] = None
                continue
            raise ConfigError(f"input {name!r} is missing; expected shape {shape} ({kind})")
        t = to_tensor(name, value)
        if tuple(t.shape) != shape:
            raise ConfigError(f"input {name!r} has shape {tuple(t.shape)}; this engine takes {shape}")
        check_kind(name, t, kind)
        tensors[name] = t
    images = tensors["images"]
    assert images is not None
    check_finite("images", images)
    lo, hi = float(images.min()), float(images.max())
    if lo < IMAGE_RANGE[0] or hi > IMAGE_RANGE[1]:
        raise ConfigError(f"input 'images' spans [{lo:.3g}, {hi:.3g}]; expected [-1, 1] (x / 127.5 - 1)")
    tokens = tensors["lang_tokens"]
    assert tokens is not None
    if int(tokens.min()) < 0 or int(tokens.max()) >= cfg.vocab_size:
        raise ConfigError(f"input 'lang_tokens' has ids outside [0, {cfg.vocab_size})")
    if tensors["state"] is not None:
        check_finite("state", tensors["state"])
    return PiObservation(**tensors)  # type: ignore[arg-type]
