"""A reference run's model-space inputs (docs/verify.md) as a `PiObservation`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError


def reference_observation(cfg: Any, inputs: dict[str, np.ndarray], where: str) -> Any:
    """A PiObservation from a reference run's `inputs.npz` (LeRobot's model inputs: `image_i`,
    `img_mask_i` per view, `tokens`, `masks`, `state`)."""
    from hotloop.families.pi.training import observation

    views = sorted(int(k.split("_")[1]) for k in inputs if k.startswith("image_"))
    if not views or views != list(range(len(views))):
        raise ConfigError(f"{where}: no image_0, image_1, ... arrays (found {sorted(inputs)})")
    for key in ("tokens", "masks", *(f"img_mask_{v}" for v in views)):
        if key not in inputs:
            raise ConfigError(
                f"{where}: key {key!r} is missing (pi's inputs: image_i, img_mask_i, tokens, masks)"
            )
    images = torch.stack([torch.from_numpy(inputs[f"image_{v}"]) for v in views], dim=1)
    masks = torch.stack([torch.from_numpy(inputs[f"img_mask_{v}"]) for v in views], dim=1)
    if images.shape[1] != cfg.views:
        raise ConfigError(f"{where}: {images.shape[1]} views; the checkpoint takes {cfg.views}")
    state = torch.from_numpy(inputs["state"]) if "state" in inputs else None
    return observation(
        images, masks, torch.from_numpy(inputs["tokens"]), torch.from_numpy(inputs["masks"]), state
    )
