"""A reference run's model-space inputs (`inputs.npz`, the batch LeRobot's predict_action_chunk receives) as
a SmolVLA observation, with the checkpoint's cameras checked by name."""

from __future__ import annotations

from typing import Any

import numpy as np

from hotloop.errors import ConfigError
from hotloop.families.reference import as_batch
from hotloop.models.smolvla_config import SmolVLAConfig


def check_cameras(cfg: SmolVLAConfig, arrays: dict[str, np.ndarray], where: str) -> None:
    """The batch must hold exactly the checkpoint's cameras (LeRobot would change the number of views)."""
    given = sorted(k for k in arrays if k.startswith("observation.image"))
    if sorted(cfg.camera_keys) != given:
        raise ConfigError(
            f"{where}: holds {len(given)} camera image(s) {given}; the checkpoint takes {len(cfg.camera_keys)}: "
            f"{', '.join(cfg.camera_keys)}"
        )


def reference_observation(
    cfg: SmolVLAConfig, inputs: dict[str, np.ndarray], where: str, slots: int | None
) -> Any:
    """A reference run's inputs.npz (the batch predict_action_chunk receives) as an observation."""
    from hotloop.families.smolvla.observation import batch_observation

    check_cameras(cfg, inputs, where)
    try:
        return batch_observation(cfg, as_batch(inputs), slots)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
