"""`ActPolicy`: a LeRobot ACT checkpoint behind the `Policy` protocol, raw robot units in and out.

    {"images": {view: (H, W, 3) uint8}, "state": (S,)}                  the sim / openpi observation
      -> LeRobot batch {"observation.images.<view>": (1, 3, H, W) float in [0, 1], "observation.state"}
      -> the checkpoint's own preprocessor (`hotloop.lerobot`, bitwise LeRobot's)
      -> the model (eager, or a compiled engine)          -> (1, chunk, A) in model space
      -> the checkpoint's postprocessor                   -> {"actions": (chunk, A)} in robot units

Views are named by the checkpoint's `input_features`: the camera `observation.images.top` reads the
view "top" (a feature outside `observation.images.` drops its `observation.` prefix), after undoing the
preprocessor's rename map, so the raw key is what the robot sends. Images are converted as LeRobot's
`prepare_observation_for_inference` does (uint8 / 255, channels first, a batch axis); they must already
have the checkpoint's size (the closed-loop adapter resizes sim views; a served policy refuses another
size rather than resize silently). An environment state travels as `obs["env_state"]`.

What eval executes: `infer` answers the whole chunk (chunk_size actions), and the policy declares how
LeRobot executes it (`strategy_defaults`): `--strategy chunk` runs n_action_steps actions per inference,
as LeRobot's action queue does, and `--strategy ensemble` takes the checkpoint's temporal_ensemble_coeff
(LeRobot then queries every step and executes the ensembled action; hotloop.realtime.strategies).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import CheckpointError, ConfigError
from hotloop.models.act import ENV_STATE_KEY, STATE_KEY, ACTConfig, ACTModel

IMAGES_PREFIX = "observation.images."
ENV_OBS_KEY = "env_state"  # the raw observation key of an environment state


def view_name(raw_key: str) -> str:
    """`observation.images.top` -> `top`; `observation.image` -> `image`."""
    if raw_key.startswith(IMAGES_PREFIX):
        return raw_key[len(IMAGES_PREFIX) :]
    return raw_key.removeprefix("observation.")


@dataclass(frozen=True)
class Camera:
    feature: str  # the model's batch key (input_features)
    raw_key: str  # what the robot's batch holds before the preprocessor's rename
    view: str  # the observation's image key
    shape: tuple[int, int, int]  # (C, H, W)


def processors_sha256(folder: Path) -> str:
    """sha256 over the checkpoint's processor files (json and stats), in name order: an artifact records
    it, so a processor changed after compiling is noticed."""
    h = hashlib.sha256()
    for path in sorted(folder.glob("policy_*processor*")):
        if path.is_file():
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _raw_keys(pre: Any) -> dict[str, str]:
    """feature key -> raw key, from the preprocessor's rename steps (inverted)."""
    from hotloop.lerobot.steps import RenameObservations

    raw: dict[str, str] = {}
    for step in pre.find(RenameObservations):
        for old, new in step.rename_map.items():
            raw.setdefault(new, old)
    return raw


def act_policy_spec(cfg: ACTConfig, cameras: tuple[Camera, ...]) -> Any:
    """What the policy consumes and returns: the checkpoint's named views at their sizes, its state, its
    action width; actions in the robot's own units ("absolute"), a whole chunk per inference."""
    from hotloop.policy_spec import ImageSpec, PolicySpec

    images = tuple(ImageSpec(c.view, c.shape[1], c.shape[2]) for c in cameras)
    return PolicySpec.named_views(
        images, state_dim=cfg.state_dim, action_dim=cfg.action_dim, horizon=cfg.chunk_size
    )


class ActPolicy:
    """See the module docstring. `run(ActObservation) -> (1, chunk, A)` replaces the eager model (a
    compiled engine's `infer`); `model` may then hold meta tensors (its config is all that is read)."""

    supports_rtc = False

    def __init__(
        self,
        model: ACTModel,
        cfg: ACTConfig,
        pre: Any,
        post: Any,
        checkpoint: Path,
        run: Callable[[Any], Tensor] | None = None,
    ) -> None:
        self.model = model
        self.config = cfg
        self.pre, self.post = pre, post
        self.checkpoint = Path(checkpoint)
        self.run = run
        config_file = self.checkpoint / "config.json"
        raw = _raw_keys(pre)
        cameras = []
        for feature, shape in zip(cfg.cameras, cfg.camera_shapes, strict=True):
            if shape[0] != 3:
                raise CheckpointError(
                    f"{config_file}: field 'input_features.{feature}.shape' is {list(shape)}; hotloop feeds "
                    "RGB cameras (3 channels first)"
                )
            key = raw.get(feature, feature)
            cameras.append(Camera(feature, key, view_name(key), shape))
        views = [c.view for c in cameras]
        if len(set(views)) != len(views):
            raise CheckpointError(f"{config_file}: cameras {list(cfg.cameras)} give the same view name twice")
        self.cameras = tuple(cameras)
        self.state_key = raw.get(STATE_KEY, STATE_KEY)
        self.env_key = raw.get(ENV_STATE_KEY, ENV_STATE_KEY)

    # ---- what it declares ----------------------------------------------------------------------------
    @property
    def spec(self) -> Any:
        return act_policy_spec(self.config, self.cameras)

    @property
    def horizon(self) -> int:
        return self.config.chunk_size

    @property
    def strategy_defaults(self) -> dict[str, Any]:
        """How LeRobot executes this checkpoint (`hotloop.realtime.strategies.apply_defaults`):
        n_action_steps actions per inference, and its temporal_ensemble_coeff when it sets one."""
        out: dict[str, Any] = {"execute_steps": self.config.n_action_steps}
        if self.config.temporal_ensemble_coeff is not None:
            out["ensemble_coeff"] = self.config.temporal_ensemble_coeff
        return out

    @property
    def observation_spec(self) -> dict[str, Any]:
        """What a served copy accepts: each view as (H, W, 3) uint8 at the checkpoint's size, the state
        (and env state) at the checkpoint's width."""
        from hotloop.policy_spec import ArraySpec

        out: dict[str, Any] = {
            f"images/{c.view}": ArraySpec((c.shape[1], c.shape[2], 3), "uint8") for c in self.cameras
        }
        if self.config.state_dim is not None:
            out["state"] = ArraySpec((self.config.state_dim,), "float32")
        if self.config.env_state_dim is not None:
            out[ENV_OBS_KEY] = ArraySpec((self.config.env_state_dim,), "float32")
        return out

    def reset(self) -> None:
        pass  # no episode state: ACT infers from the current observation alone (n_obs_steps 1)

    # ---- raw observation -> LeRobot batch -> model inputs ---------------------------------------------
    def _image(self, camera: Camera, value: Any) -> Tensor:
        arr = np.asarray(value)
        c, h, w = camera.shape
        if arr.shape != (h, w, c):
            raise ConfigError(
                f"obs['images'][{camera.view!r}] has shape {arr.shape}; {self.checkpoint.name} reads it as "
                f"({h}, {w}, {c}) (input_features {camera.feature!r})"
            )
        if arr.dtype == np.uint8:
            x = torch.from_numpy(np.array(arr)).to(torch.float32) / 255  # a copy: wire arrays are read-only
        elif arr.dtype.kind == "f":
            lo, hi = float(arr.min()), float(arr.max())
            if not (lo >= 0.0 and hi <= 1.0):  # also catches NaN
                raise ConfigError(
                    f"obs['images'][{camera.view!r}] floats must lie in [0, 1]; found [{lo:g}, {hi:g}] "
                    "(0-255 pixels? pass them as uint8)"
                )
            x = torch.from_numpy(np.array(arr, dtype=np.float32))
        else:
            raise ConfigError(
                f"obs['images'][{camera.view!r}] must be uint8 pixels or floats in [0, 1] (got {arr.dtype})"
            )
        return x.permute(2, 0, 1).contiguous().unsqueeze(0)

    def _vector(self, obs: Mapping[str, Any], key: str, width: int) -> Tensor:
        if key not in obs:
            raise ConfigError(f"obs must hold {key!r}, a vector of {width} numbers")
        try:
            v = np.asarray(obs[key], dtype=np.float32)
        except (TypeError, ValueError):
            raise ConfigError(f"obs[{key!r}] must be a vector of numbers") from None
        if v.shape != (width,):
            raise ConfigError(f"obs[{key!r}] has shape {v.shape}; {self.checkpoint.name} takes ({width},)")
        if not np.isfinite(v).all():
            raise ConfigError(f"obs[{key!r}] holds NaN or infinite values")
        return torch.from_numpy(v.copy()).unsqueeze(0)

    def batch(self, obs: Mapping[str, Any]) -> dict[str, Tensor]:
        """The raw observation as a LeRobot batch (batch 1), before the preprocessor."""
        cfg = self.config
        if not isinstance(obs, Mapping):
            raise ConfigError("obs must be a dict with 'images' {view: (H, W, 3)} and 'state'")
        out: dict[str, Tensor] = {}
        if self.cameras:
            images = obs.get("images")
            if not isinstance(images, Mapping):
                raise ConfigError(
                    f"obs['images'] must be a dict of views {{{', '.join(c.view for c in self.cameras)}}}"
                )
            missing = [c.view for c in self.cameras if c.view not in images]
            if missing:
                raise ConfigError(
                    f"obs['images'] lacks view(s) {', '.join(missing)} (it has {', '.join(images) or 'none'})"
                )
            for camera in self.cameras:
                out[camera.raw_key] = self._image(camera, images[camera.view])
        if cfg.state_dim is not None:
            out[self.state_key] = self._vector(obs, "state", cfg.state_dim)
        if cfg.env_state_dim is not None:
            out[self.env_key] = self._vector(obs, ENV_OBS_KEY, cfg.env_state_dim)
        return out

    def observation(self, obs: Mapping[str, Any]) -> Any:
        """Raw observation -> model-space `ActObservation` (batch 1) through the preprocessor."""

        processed = self.pre(self.batch(obs))
        return model_observation(self.config, processed, self.pre.file)

    def actions(self, chunk: Tensor) -> np.ndarray:
        """(1, chunk, A) model space -> (chunk, A) robot units through the postprocessor."""
        raw = self.post.action(chunk.float())
        return raw[0].detach().cpu().numpy().astype(np.float32)

    @torch.inference_mode()
    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        model_obs = self.observation(obs)
        if self.run is not None:
            chunk = self.run(model_obs)
        else:
            chunk = self.model(list(model_obs.images), model_obs.state, model_obs.env_state)
        return {"actions": self.actions(chunk)}


def model_observation(cfg: ACTConfig, processed: Mapping[str, Any], where: Path) -> Any:
    """The preprocessor's output as an ActObservation; a model input it did not produce is named."""
    from hotloop.families.act.engines import ActObservation

    def get(key: str) -> Tensor:
        value = processed.get(key)
        if not isinstance(value, Tensor):
            raise CheckpointError(
                f"{where}: the preprocessor's output lacks {key!r}, which the model reads (a rename step "
                "that does not produce the config's input_features?)"
            )
        return value

    return ActObservation(
        tuple(get(c) for c in cfg.cameras),
        get(STATE_KEY) if cfg.state_dim is not None else None,
        get(ENV_STATE_KEY) if cfg.env_state_dim is not None else None,
    )


def load_policy(folder: Path, run: Callable[[Any], Tensor] | None = None, model: Any = None) -> ActPolicy:
    """The eager policy of a checkpoint folder (its weights, config and processors)."""
    from hotloop.lerobot.processors import read_policy_processors
    from hotloop.models.act import load_act

    if model is None:
        cfg, model = load_act(folder)
    else:
        cfg = model.cfg
    pre, post = read_policy_processors(Path(folder))
    return ActPolicy(model, cfg, pre, post, Path(folder), run)


def policy_info(policy: ActPolicy) -> dict[str, Any]:
    """What an artifact stores to rebuild the policy around its engine: the checkpoint folder (its
    processors are re-read from there, checked against their hash) and the spec."""
    return {
        "kind": "act",
        "checkpoint": str(policy.checkpoint.resolve()),
        "processors_sha256": processors_sha256(policy.checkpoint),
        "spec": policy.spec.to_dict(),
    }


def engine_policy(engine: Any, info: dict[str, Any]) -> ActPolicy:
    """A loaded ACT artifact as a robot policy: the compiled engine between the checkpoint's processors."""
    from hotloop.lerobot.processors import read_policy_processors

    where = Path(engine.path) / "manifest.json"
    folder = Path(str(info.get("checkpoint", "")))
    if not info.get("checkpoint") or not (folder / "config.json").is_file():
        raise CheckpointError(
            f"{where}: the policy's checkpoint {str(folder)!r} is gone; its processors (normalisation) live "
            "there: restore the folder or recompile from where it is now"
        )
    want = info.get("processors_sha256")
    if want is not None and processors_sha256(folder) != want:
        raise CheckpointError(
            f"{where}: the processor files of {folder} changed since the artifact was compiled; recompile it"
        )
    pre, post = read_policy_processors(folder)
    return ActPolicy(engine.model, engine.cfg, pre, post, folder, run=lambda obs: engine.infer(obs))


__all__ = ["ActPolicy", "act_policy_spec", "engine_policy", "load_policy", "policy_info", "view_name"]
