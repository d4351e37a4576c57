"""hotloop's own stand-ins for the two LeRobot classes a stock client pickles to the server.

`lerobot.async_inference.helpers.RemotePolicyConfig` and `.TimedObservation` are dataclasses; the stock
client pickles them with protocol 4 (NEWOBJ on the class, then BUILD with the instance dict). The
allow-list unpickler (`unpickle`) resolves those two names to the classes here, whose `__setstate__`
admits exactly the fields LeRobot 0.4.4 defines, each of the type it has there, so LeRobot need not be
installed on the server and nothing but plain data comes out. Field checks raise `Refused` naming the
field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from hotloop.serve.lerobot.numpy_standins import ArrayStandIn, Refused, ScalarStandIn, finished

LEROBOT_HELPERS = "lerobot.async_inference.helpers"
MAX_FEATURES = 256  # robot features one client may declare (motors + cameras); a real arm has < 40
MAX_NAME_CHARS = 200


def _text(name: str, value: Any, limit: int = MAX_NAME_CHARS) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise Refused(f"{name} must be a string of at most {limit} characters")
    return value


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise Refused(f"{name} must be an integer")
    return int(value)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise Refused(f"{name} must be a number")
    return float(value)


def _state_dict(cls_name: str, state: Any, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(state, dict):
        raise Refused(f"{cls_name} arrived without its fields")
    names = set(state)
    unknown, missing = names - required - optional, required - names
    if unknown or missing:
        parts = [f"unknown field(s) {sorted(map(str, unknown))[:5]}"] if unknown else []
        parts += [f"missing field(s) {sorted(missing)}"] if missing else []
        raise Refused(f"{cls_name} with {'; '.join(parts)} (LeRobot 0.4.4's fields expected)")
    return state


@dataclass(frozen=True)
class RobotFeature:
    """One entry of the client's `lerobot_features` (`hw_to_dataset_features(robot.observation_features,
    "observation", use_video=False)`): a state vector with its motor names, or a camera."""

    dtype: str  # "float32" for the state, "image" (or "video") for a camera
    shape: tuple[int, ...]
    names: tuple[str, ...]


def _feature(key: str, value: Any) -> RobotFeature:
    if not isinstance(value, dict) or not {"dtype", "shape"} <= set(value):
        raise Refused(f"lerobot_features[{key!r}] must be a dict with dtype, shape and names")
    shape = value["shape"]
    if not isinstance(shape, tuple | list) or not 1 <= len(shape) <= 3:
        raise Refused(f"lerobot_features[{key!r}] shape must be a tuple of 1 to 3 sizes")
    sizes = tuple(_integer(f"lerobot_features[{key!r}] shape", d) for d in shape)
    if any(d < 1 or d > 2**16 for d in sizes):
        raise Refused(f"lerobot_features[{key!r}] shape {sizes} is out of range")
    names = value.get("names") or ()
    if not isinstance(names, tuple | list) or len(names) > MAX_FEATURES:
        raise Refused(f"lerobot_features[{key!r}] names must be a list of at most {MAX_FEATURES}")
    return RobotFeature(
        _text(f"lerobot_features[{key!r}] dtype", value["dtype"], 20),
        sizes,
        tuple(_text(f"lerobot_features[{key!r}] names", n) for n in names),
    )


class RemotePolicyConfig:
    """Stand-in for `lerobot.async_inference.helpers.RemotePolicyConfig` (what `SendPolicyInstructions`
    carries): the policy the client asks for and its robot's features."""

    policy_type: str
    pretrained_name_or_path: str
    lerobot_features: dict[str, RobotFeature]
    actions_per_chunk: int
    device: str
    rename_map: dict[str, str]

    def __setstate__(self, state: Any) -> None:
        fields = _state_dict(
            "RemotePolicyConfig",
            state,
            {"policy_type", "pretrained_name_or_path", "lerobot_features", "actions_per_chunk"},
            {"device", "rename_map"},
        )
        self.policy_type = _text("policy_type", fields["policy_type"])
        self.pretrained_name_or_path = _text(
            "pretrained_name_or_path", fields["pretrained_name_or_path"], 4096
        )
        features = fields["lerobot_features"]
        if not isinstance(features, dict) or len(features) > MAX_FEATURES:
            raise Refused(f"lerobot_features must be a dict of at most {MAX_FEATURES} features")
        self.lerobot_features = {
            _text("a lerobot_features key", k): _feature(k, v) for k, v in features.items()
        }
        self.actions_per_chunk = _integer("actions_per_chunk", fields["actions_per_chunk"])
        self.device = _text("device", fields.get("device", "cpu"), 40)
        rename = fields.get("rename_map") or {}
        if not isinstance(rename, dict) or len(rename) > MAX_FEATURES:
            raise Refused("rename_map must be a dict of feature names")
        self.rename_map = {
            _text("a rename_map key", k): _text("a rename_map value", v) for k, v in rename.items()
        }


Value = float | int | bool | str | np.ndarray | np.generic


def _observation_value(key: str, value: Any) -> Value:
    if isinstance(value, ArrayStandIn | ScalarStandIn):
        return finished(value)  # type: ignore[no-any-return]
    if isinstance(value, bool | int | float | str):
        return value
    raise Refused(
        f"observation[{key[:MAX_NAME_CHARS]!r}] is a {type(value).__name__}; a robot observation holds "
        "numbers, numpy arrays and text"
    )


class TimedObservation:
    """Stand-in for `lerobot.async_inference.helpers.TimedObservation` (what `SendObservations`
    carries): the robot's raw observation, the client's wall time and the timestep of its latest
    executed action."""

    timestamp: float
    timestep: int
    observation: dict[str, Value]
    must_go: bool

    def __setstate__(self, state: Any) -> None:
        fields = _state_dict("TimedObservation", state, {"timestamp", "timestep", "observation"}, {"must_go"})
        self.timestamp = _number("timestamp", fields["timestamp"])
        self.timestep = _integer("timestep", fields["timestep"])
        if not 0 <= self.timestep < 2**62:
            raise Refused(f"timestep {self.timestep} is out of range")
        must_go = fields.get("must_go", False)
        if not isinstance(must_go, bool):
            raise Refused("must_go must be a bool")
        self.must_go = must_go
        observation = fields["observation"]
        if not isinstance(observation, dict) or len(observation) > MAX_FEATURES:
            raise Refused(f"observation must be a dict of at most {MAX_FEATURES} entries")
        self.observation = {
            _text("an observation key", k): _observation_value(str(k), v) for k, v in observation.items()
        }


STANDIN_GLOBALS: Mapping[tuple[str, str], type] = MappingProxyType(
    {
        (LEROBOT_HELPERS, "RemotePolicyConfig"): RemotePolicyConfig,
        (LEROBOT_HELPERS, "TimedObservation"): TimedObservation,
    }
)


@dataclass(frozen=True)
class TimedAction:
    """One action of a reply, as `lerobot.async_inference.helpers.TimedAction` holds it (`reply` writes
    the pickle under LeRobot's class name)."""

    timestamp: float
    timestep: int
    action: np.ndarray = field(repr=False)
