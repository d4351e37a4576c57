"""The stand-in robot's fixed camera frames and its features (numpy only: imported by both venvs)."""

from __future__ import annotations

import numpy as np


def camera_image(name: str, height: int, width: int) -> np.ndarray:
    """The fixed frame of camera `name`: a pattern that differs per camera and per pixel."""
    seed = sum(ord(c) for c in name)
    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([(x * 3 + seed) % 256, (y * 5 + 2 * seed) % 256, ((x + y) * 7 + seed) % 256], axis=-1)
    return img.astype(np.uint8)


def parse_views(text: str) -> dict[str, tuple[int, int]]:
    """ "top:96x128,wrist:64x64" -> {"top": (96, 128), "wrist": (64, 64)}."""
    out = {}
    for part in filter(None, text.split(",")):
        name, size = part.split(":")
        h, w = size.split("x")
        out[name] = (int(h), int(w))
    return out


def first_observation(state_dim: int, views: str, task: str) -> dict[str, object]:
    """What the stand-in robot's first `get_observation()` returns, plus the client's `task`."""
    obs: dict[str, object] = {f"j{i}.pos": 0.0 for i in range(state_dim)}
    obs.update({n: camera_image(n, h, w) for n, (h, w) in parse_views(views).items()})
    obs["task"] = task
    return obs


def lerobot_features(state_dim: int, views: str) -> dict[str, dict[str, object]]:
    """`hw_to_dataset_features(robot.observation_features, "observation", use_video=False)` of the stand-in."""
    out: dict[str, dict[str, object]] = {
        "observation.state": {
            "dtype": "float32",
            "shape": (state_dim,),
            "names": [f"j{i}.pos" for i in range(state_dim)],
        }
    }
    for name, (h, w) in parse_views(views).items():
        out[f"observation.images.{name}"] = {
            "dtype": "image",
            "shape": (h, w, 3),
            "names": ["height", "width", "channels"],
        }
    return out
