"""What a policy consumes and what a task provides, as data.

A `PolicySpec` says which camera views a policy reads (names and pixel sizes), how long a state vector
it takes, how many action dimensions it returns and what they mean. A `TaskSpec` says the same of an
environment: the views it renders, its state, its action. `hotloop.closedloop.adapter` maps one onto the
other (view selection, resize, state and action padding/cropping) or names the mismatch it cannot
adapt. Both are plain frozen data with `to_dict` / `from_dict`, so a compiled artifact can store the
spec of the policy it was built from and be evaluated through the same adapter.

Action meanings:
- "absolute": targets in the task's own action space (the gantry's `[x, y, z, grip]`).
- "ee_delta": the first three entries are a displacement from the end effector at observation time
  (openpi's delta actions); the rest are absolute. Needs a task that names its end-effector state.
- "any": random-weight or benchmark policies that have not been trained for a meaning; they run
  wherever the dimensions can be adapted (the point is that the loop runs and measures).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hotloop.errors import ConfigError

ActionMeaning = Literal["absolute", "ee_delta", "any"]
ACTION_MEANINGS = ("absolute", "ee_delta", "any")


@dataclass(frozen=True)
class ImageSpec:
    """One camera view: its name and size in pixels (height, width, 3 channels, uint8)."""

    key: str
    height: int
    width: int

    def __post_init__(self) -> None:
        if self.height < 1 or self.width < 1:
            raise ConfigError(
                f"image {self.key!r} must have a positive size (got {self.height}x{self.width})"
            )


@dataclass(frozen=True)
class PolicySpec:
    """What a policy consumes and returns.

    `images`: the views it reads, in order. A key of "*" takes whatever view the task provides at that
    position (models trained on "a base camera" rather than a named one). `min_views` of them must be
    present; the rest may be absent (the policy masks them). `images_as`: "array" stacks the views into
    one (V, H, W, 3) array (pi0-style models), "dict" passes {key: (H, W, 3)}. `state_dim` None: no state.
    `prompt`: whether it reads the task's text prompt (a policy without a tokenizer does not).
    """

    images: tuple[ImageSpec, ...] = ()
    min_views: int = 0
    images_as: Literal["array", "dict"] = "dict"
    state_dim: int | None = None
    action_dim: int = 1
    action_meaning: ActionMeaning = "absolute"
    horizon: int = 1
    prompt: bool = False

    def __post_init__(self) -> None:
        if self.action_dim < 1 or self.horizon < 1:
            raise ConfigError(
                f"a policy needs action_dim and horizon >= 1 (got {self.action_dim}, {self.horizon})"
            )
        if self.state_dim is not None and self.state_dim < 0:
            raise ConfigError(f"state_dim must be >= 0 (got {self.state_dim})")
        if not 0 <= self.min_views <= len(self.images):
            raise ConfigError(f"min_views must be in [0, {len(self.images)}] (got {self.min_views})")
        if self.action_meaning not in ACTION_MEANINGS:
            raise ConfigError(
                f"action meaning {self.action_meaning!r} is not known; use one of {', '.join(ACTION_MEANINGS)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "images": [{"key": i.key, "height": i.height, "width": i.width} for i in self.images],
            "min_views": self.min_views,
            "images_as": self.images_as,
            "state_dim": self.state_dim,
            "action_dim": self.action_dim,
            "action_meaning": self.action_meaning,
            "horizon": self.horizon,
            "prompt": self.prompt,
        }

    @classmethod
    def named_views(cls, images: tuple[ImageSpec, ...], **rest: Any) -> PolicySpec:
        """A LeRobot checkpoint's spec: every one of `images` required, passed by name ({key: (H, W, 3)});
        `rest`: the state, action and chunk fields (actions in robot units unless said otherwise)."""
        return cls(images=images, min_views=len(images), images_as="dict", **rest)

    @classmethod
    def from_dict(cls, data: Any) -> PolicySpec:
        """Read a stored spec (an artifact's); a malformed one raises ConfigError naming the field."""
        if not isinstance(data, dict):
            raise ConfigError(f"a policy spec must be a JSON object (got {type(data).__name__})")
        try:
            images = tuple(
                ImageSpec(str(i["key"]), int(i["height"]), int(i["width"])) for i in data.get("images", [])
            )
            state_dim = data.get("state_dim")
            return cls(
                images=images,
                min_views=int(data.get("min_views", 0)),
                images_as=data.get("images_as", "dict"),
                state_dim=None if state_dim is None else int(state_dim),
                action_dim=int(data["action_dim"]),
                action_meaning=data.get("action_meaning", "absolute"),
                horizon=int(data.get("horizon", 1)),
                prompt=bool(data.get("prompt", False)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(
                f"malformed policy spec ({type(e).__name__}: {e}); see hotloop.policy_spec"
            ) from None


@dataclass(frozen=True)
class ArraySpec:
    """One entry a served policy accepts (`observation_spec`: key -> ArraySpec, keys of nested maps
    joined with "/"), checked by `hotloop.serve.spec` on every observation."""

    shape: tuple[int, ...]  # -1: any length along that axis (e.g. RTC's remaining actions of the last chunk)
    dtype: str  # a numpy dtype name ("float32", "uint8", ...) or "str" for text such as openpi's "prompt"
    optional: bool = False  # may be absent (e.g. RTC guidance, sent only while a chunk is executing)

    def __post_init__(self) -> None:
        if self.dtype == "str" and self.shape != ():
            raise ValueError(f"a str entry has shape (), not {self.shape}")
        if any(d < -1 for d in self.shape):
            raise ValueError(f"shape {self.shape}: use -1 for a free axis, sizes >= 0 otherwise")

    def matches(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.shape) and all(
            w in (-1, g) for w, g in zip(self.shape, shape, strict=True)
        )

    def to_wire(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "optional": self.optional}


@dataclass(frozen=True)
class TaskSpec:
    """What an environment provides and accepts.

    `action_names` fix the action dimension; `action_meaning` is what the env's action means to the
    evaluator ("absolute": a target held while the policy thinks). `ee_state` names the state entries
    that hold the end-effector position (needed to turn "ee_delta" actions into absolute targets).
    `action_low` / `action_high` bound the action (used to pad missing dimensions at the midpoint of the
    range, a neutral value, rather than at an arbitrary zero); empty when unbounded. `length_unit` is the
    unit of the positions in the first action entries and in `ee_state` ("m", "px"), which the evaluator's
    chunk-jump and jerk figures are in; None when the actions are not positions (then those figures are
    in the env's own action units, or not reported).
    `optional_images`: views the task can also render but does not unless a policy asks for one by name
    (the gantry's wrist camera); `hotloop.closedloop.adapter.request_views` turns them on.
    """

    name: str
    images: tuple[ImageSpec, ...]
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    action_meaning: Literal["absolute"] = "absolute"
    ee_state: tuple[int, ...] = ()
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    prompt: str = ""
    fps: float = 10.0
    robot_type: str = "unknown"
    length_unit: str | None = "m"
    optional_images: tuple[ImageSpec, ...] = ()

    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def action_dim(self) -> int:
        return len(self.action_names)
