"""How a Diffusion checkpoint reads recorded frames (`hotloop.families.frames.TargetAdapter`): calibration
for static int8, sensitivity and judging sets, through the checkpoint's own preprocessor.

A frame adapter sees one frame, so the n_obs_steps history is that frame repeated: what LeRobot's policy
holds right after `reset` (its queue filled with copies of the first observation), and what LeRobot's
dataset gives at an episode's first frame (indices before it are clamped to it). The action targets follow
the model's output layout: horizon rows from n_obs_steps - 1 steps before the frame, the rows before the
frame copies of its action (the same clamping), normalised by the checkpoint's ACTION statistics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.families.frames import DataLimits, TargetAdapter, resize_with_pad


def _fitted(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """A frame at the model's size: floats in [0, 1] (raw LeRobot batches) pass through untouched when
    they already fit, anything else is resized as uint8 pixels."""
    if image.dtype.kind == "f" and image.shape[:2] == (height, width):
        return image
    if image.dtype.kind == "f":
        image = np.round(np.clip(image, 0.0, 1.0) * 255.0)
    return resize_with_pad(image.astype(np.uint8), height, width)


def diffusion_target_adapter(name: str | Path, cfg: Any, preprocessor: Any) -> TargetAdapter:
    from hotloop.families.diffusion.engines import DiffusionObservation
    from hotloop.families.diffusion.family import DiffusionFamily
    from hotloop.families.diffusion.policy import ENV_STATE, IMAGES, STATE, DiffusionPolicyWrapper, view_key

    wrapper = DiffusionPolicyWrapper(None, cfg, preprocessor, None)
    o = cfg.n_obs_steps
    named = all(k.startswith("observation.images.") for k in cfg.camera_keys)

    def observe(images: dict[str, np.ndarray], state: np.ndarray, task_index: int) -> Any:  # noqa: ARG001
        views = {}
        if cfg.image_shape is not None:
            _, h, w = cfg.image_shape
            views = {k: _fitted(np.asarray(v), h, w) for k, v in images.items()}
        frame = wrapper.frame({"images": views, "state": state})
        rep = {k: torch.stack([v] * o, dim=1) for k, v in frame.items()}
        return DiffusionObservation(rep[STATE], rep.get(IMAGES), rep.get(ENV_STATE))

    def targets(chunk: np.ndarray, state: np.ndarray) -> np.ndarray:
        rows = np.concatenate([np.repeat(chunk[:1], o - 1, axis=0), chunk], axis=0)[: cfg.horizon]
        if len(rows) < cfg.horizon:  # past the episode's end: its last action repeated (LeRobot's padding)
            rows = np.concatenate([rows, np.repeat(rows[-1:], cfg.horizon - len(rows), axis=0)])
        batch = {
            STATE: torch.from_numpy(np.asarray(state, dtype=np.float32)),
            "action": torch.from_numpy(rows.astype(np.float32)),
        }
        return preprocessor(batch)["action"].numpy().astype(np.float32)  # type: ignore[no-any-return]

    limits = DataLimits(cfg.state_dim, cfg.action_dim, cfg.n_cameras, cfg.horizon - (o - 1))
    keys = tuple(view_key(k) for k in cfg.camera_keys) if named else None
    return TargetAdapter(
        str(name), observe, targets, cfg.state_dim, cfg.action_dim, keys, None, limits, DiffusionFamily()
    )
