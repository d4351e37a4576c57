"""A reference run's model-space inputs (docs/verify.md) as an `ActObservation`.

`inputs.npz` holds what LeRobot's `predict_action_chunk` receives, under its batch keys: one
`observation.images.<cam>` (B, C, H, W) per camera of the config, `observation.state` (B, S) and
`observation.environment_state` (B, E) when the checkpoint takes them, all already normalised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError
from hotloop.models.act import ENV_STATE_KEY, STATE_KEY, ACTConfig


def model_keys(cfg: ACTConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(LeRobot batch key, shape without the batch) of every model input, in config order."""
    keys = [(cam, tuple(shape)) for cam, shape in zip(cfg.cameras, cfg.camera_shapes, strict=True)]
    if cfg.state_dim is not None:
        keys.append((STATE_KEY, (cfg.state_dim,)))
    if cfg.env_state_dim is not None:
        keys.append((ENV_STATE_KEY, (cfg.env_state_dim,)))
    return keys


def reference_observation(cfg: ACTConfig, inputs: Mapping[str, Any], where: str) -> Any:
    """An ActObservation from `inputs` (arrays or tensors under LeRobot's keys); a missing key, another
    batch, or a shape that does not fit the checkpoint is a ConfigError naming `where` and the key."""
    from hotloop.families.act.engines import ActObservation

    tensors: dict[str, torch.Tensor] = {}
    batch: int | None = None
    for key, shape in model_keys(cfg):
        if key not in inputs:
            raise ConfigError(
                f"{where}: key {key!r} is missing (this ACT checkpoint takes {', '.join(k for k, _ in model_keys(cfg))})"
            )
        value = inputs[key]
        t = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
        if t.dim() != len(shape) + 1 or tuple(t.shape[1:]) != shape:
            raise ConfigError(
                f"{where}: key {key!r} has shape {tuple(t.shape)}; this checkpoint takes (batch, "
                f"{', '.join(str(d) for d in shape)})"
            )
        if batch is not None and t.shape[0] != batch:
            raise ConfigError(f"{where}: key {key!r} has batch {t.shape[0]}, the other inputs {batch}")
        if not t.is_floating_point():
            raise ConfigError(f"{where}: key {key!r} has dtype {t.dtype}; model inputs are floats")
        batch = int(t.shape[0])
        tensors[key] = t.float()
    return ActObservation(
        tuple(tensors[c] for c in cfg.cameras), tensors.get(STATE_KEY), tensors.get(ENV_STATE_KEY)
    )


__all__ = ["model_keys", "reference_observation"]
