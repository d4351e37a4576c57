"""A client's robot, mapped onto the served policy's observation as LeRobot's own server maps it.

The stock client declares its robot once, in `RemotePolicyConfig.lerobot_features`
(`hw_to_dataset_features(robot.observation_features, "observation")`): `observation.state` with the motor
names in order (`shoulder_pan.pos`, ...) and `observation.images.<camera>` with each camera's (H, W, 3).
Each observation is then the robot's raw dict (`{"shoulder_pan.pos": 0.1, ..., "front": uint8 (H, W, 3),
"task": "..."}`). LeRobot's server builds the state vector from the names in order, takes each camera by
name, resizes it to the checkpoint's (H, W) (bilinear, `torch.nn.functional.interpolate` on the uint8
image) and passes `task` to the policy; `rename_map` renames features first. Here the same, onto
hotloop's served spec: `observation.state` -> `state`, `observation.images.<camera>` -> `images/<camera>`
(a lone `observation.image` -> `images/image`), `task` -> `prompt` where the policy reads one.

Checked once, when the client sends its instructions (`map_features`, `Mismatch` naming the feature):
every input the policy needs is declared, nothing is declared that the policy does not read (LeRobot's
server would fail at the first observation), the state has the checkpoint's width, cameras are RGB.
Checked at every observation (`FeatureMap.observation`, `ObservationError` naming the key): each declared
motor and camera is there, cameras have the declared shape and are uint8.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hotloop.serve.lerobot.standins import RobotFeature
from hotloop.serve.spec import ArraySpec, ObservationError, clip

STATE = "observation.state"
IMAGES = "observation.images."
LONE_IMAGE = "observation.image"
TASK = "task"


class Mismatch(ValueError):
    """The client's robot does not fit the served policy; the text names the feature and the fix."""


@dataclass(frozen=True)
class Camera:
    spec_key: str  # "images/<view>"
    robot_key: str  # the raw observation's key (the robot's camera name)
    robot_shape: tuple[int, int, int]  # (H, W, 3) as the robot sends it
    served_shape: tuple[int, int, int]  # (H, W, 3) as the policy reads it


@dataclass(frozen=True)
class FeatureMap:
    """How one client's raw observations become the served policy's observation."""

    state_names: tuple[str, ...]
    cameras: tuple[Camera, ...]
    prompt_key: str | None  # "prompt" when the policy reads the task text

    def observation(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The served policy's observation from a robot's raw one (then checked against the spec)."""
        out: dict[str, Any] = {}
        if self.state_names:
            missing = [n for n in self.state_names if n not in raw]
            if missing:
                raise ObservationError(
                    f"the observation lacks motor(s) {', '.join(map(repr, missing[:5]))} declared in "
                    "lerobot_features; send every declared key"
                )
            values = []
            for name in self.state_names:
                value = raw[name]
                if isinstance(value, str | bytes) or np.ndim(value) != 0:
                    raise ObservationError(f"{clip(repr(name))} is {type(value).__name__}; send one number")
                values.append(value)
            with np.errstate(all="ignore"):
                out["state"] = np.asarray(values, dtype=np.float64)
        images: dict[str, Any] = {}
        for camera in self.cameras:
            if camera.robot_key not in raw:
                raise ObservationError(
                    f"the observation lacks camera {camera.robot_key!r}; send every declared key"
                )
            images[camera.spec_key.split("/", 1)[1]] = _camera_image(camera, raw[camera.robot_key])
        if images:
            out["images"] = images
        task = raw.get(TASK)
        if self.prompt_key is not None and isinstance(task, str):
            out[self.prompt_key] = task
        return out


def _camera_image(camera: Camera, value: Any) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype != np.uint8:
        what = f"{value.dtype} array" if isinstance(value, np.ndarray) else type(value).__name__
        raise ObservationError(f"camera {camera.robot_key!r} is a {what}; send uint8 (H, W, 3) pixels")
    if value.shape != camera.robot_shape:
        raise ObservationError(
            f"camera {camera.robot_key!r} has shape {value.shape}; lerobot_features declared {camera.robot_shape}"
        )
    if camera.robot_shape == camera.served_shape:
        return value
    return resize(value, camera.served_shape[:2])


def resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """LeRobot's `resize_robot_observation_image`: bilinear, align_corners False, on the uint8 image."""
    import torch

    chw = (
        torch.from_numpy(np.array(image, copy=True)).permute(2, 0, 1).unsqueeze(0)
    )  # wire arrays are read-only
    out = torch.nn.functional.interpolate(chw, size=size, mode="bilinear", align_corners=False)
    return out.squeeze(0).permute(1, 2, 0).contiguous().numpy()


def _spec_key(feature: str) -> str | None:
    if feature == STATE:
        return "state"
    if feature.startswith(IMAGES):
        return "images/" + feature[len(IMAGES) :]
    if feature == LONE_IMAGE:
        return "images/image"
    return None


def map_features(
    features: Mapping[str, RobotFeature], rename_map: Mapping[str, str], spec: Mapping[str, ArraySpec]
) -> FeatureMap:
    """The client's declared features onto `spec` (the served policy's observation spec); `Mismatch`
    names the first feature that does not fit."""
    state_names: tuple[str, ...] = ()
    cameras: list[Camera] = []
    covered: set[str] = set()
    for feature, declared in features.items():
        renamed = rename_map.get(feature, feature)
        key = _spec_key(renamed)
        if key is None or key not in spec:
            reads = ", ".join(k for k in spec if not spec[k].optional) or "nothing"
            raise Mismatch(
                f"the robot's {feature!r}{f' (renamed {renamed!r})' if renamed != feature else ''} is not an "
                f"input of the served policy, which reads {reads}; remove that camera or motor from the robot "
                "config, or serve a policy trained with it"
            )
        want = spec[key]
        if key == "state":
            if declared.shape != (want.shape[0],):
                raise Mismatch(
                    f"the robot declares {len(declared.names)} motor(s) in {feature!r} (shape {declared.shape}); "
                    f"the served policy reads a state of {want.shape[0]}; drive it with the robot it was trained on"
                )
            if len(declared.names) != declared.shape[0]:
                raise Mismatch(f"{feature!r} has shape {declared.shape} but {len(declared.names)} names")
            state_names = declared.names
        else:
            if len(declared.shape) != 3 or declared.shape[2] != 3:
                raise Mismatch(f"camera {feature!r} has shape {declared.shape}; send RGB (H, W, 3) images")
            camera = feature[len(IMAGES) :] if feature.startswith(IMAGES) else feature
            served = (want.shape[0], want.shape[1], want.shape[2])
            robot_shape = (declared.shape[0], declared.shape[1], declared.shape[2])
            cameras.append(Camera(key, camera, robot_shape, served))
        covered.add(key)
    missing = [k for k, s in spec.items() if not s.optional and s.dtype != "str" and k not in covered]
    if missing:
        raise Mismatch(
            f"the served policy reads {', '.join(map(repr, missing))}, which the robot does not declare "
            f"(it declares {', '.join(map(repr, features)) or 'nothing'}); add the camera or motors, or "
            "pass rename_map"
        )
    prompt = "prompt" if "prompt" in spec and spec["prompt"].dtype == "str" else None
    return FeatureMap(state_names, tuple(cameras), prompt)
