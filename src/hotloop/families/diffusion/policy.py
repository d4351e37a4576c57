"""`DiffusionPolicyWrapper`: a LeRobot Diffusion checkpoint behind the `Policy` protocol, robot units in and
robot units out, with LeRobot's observation history.

    raw obs {"images": {view: (H, W, 3) uint8}, "state": (S,)[, "environment_state": (E,)]}
      -> LeRobot batch -> the checkpoint's saved preprocessor (`hotloop.lerobot`, bitwise LeRobot's)
      -> the n_obs_steps history (oldest first) -> the model (eager, or a compiled engine)
      -> the n_action_steps from the current step (`select_action_chunk`) -> the postprocessor
      -> {"actions": (n_action_steps, A)} in robot units

The history. LeRobot's `DiffusionPolicy.select_action` runs every control step: it appends that step's
(preprocessed) observation to a queue of n_obs_steps (filled with copies of the first one after
`reset`) and predicts a chunk only when its action queue is empty. hotloop's closed loop asks for a
chunk only when one is due, so the wrapper offers the optional `observe(obs)` hook: the evaluator and
the robot runner call it with every control period's observation, before any `infer` of that period
(`hotloop.realtime.runner.run_loop`), and `infer` then reads the history as it stands. A caller that never
calls `observe` (an openpi-style client, a plain script) gets every `infer` observation appended, as
LeRobot does when `select_action` is its only call. `new_session()` gives a server connection its own
history and noise stream over the same model (`hotloop serve` keeps one per connection).

Noise: each chunk draws x_T and the per-step variance noise from the wrapper's generator (seeded;
`reset` restarts it), the family's noise layout (`hotloop.families.diffusion.engines`). An artifact
made with the recipe step `zero-noise` (`zero_noise`) samples from x_T = 0 instead: its DDIM sampler is
then deterministic, the same chunk for the same history.
"""

from __future__ import annotations

import copy
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError
from hotloop.models.diffusion_config import DiffusionConfig
from hotloop.policy import episode_noise_seed

STATE, ENV_STATE, IMAGES = "observation.state", "observation.environment_state", "observation.images"
IMAGE_PREFIX = "observation.images."


def view_key(camera: str) -> str:
    """The raw observation's view name of a LeRobot camera key: `observation.images.top` -> `top`, a
    single unnamed `observation.image` -> `image`."""
    if camera.startswith(IMAGE_PREFIX):
        return camera[len(IMAGE_PREFIX) :]
    return camera.removeprefix("observation.")


def diffusion_spec(cfg: DiffusionConfig) -> Any:
    """Its views by name (a camera LeRobot names only `observation.image` takes any view: "*"), at the
    checkpoint's image size; its state; absolute actions in robot units, n_action_steps per chunk."""
    from hotloop.policy_spec import ImageSpec, PolicySpec

    images: tuple[ImageSpec, ...] = ()
    if cfg.image_shape is not None:
        _, h, w = cfg.image_shape
        images = tuple(
            ImageSpec(view_key(k) if k.startswith(IMAGE_PREFIX) else "*", h, w) for k in cfg.camera_keys
        )
    return PolicySpec.named_views(
        images, state_dim=cfg.state_dim, action_dim=cfg.action_dim, horizon=cfg.n_action_steps
    )


class DiffusionPolicyWrapper:
    """See the module docstring. `run(obs, noise) -> (1, horizon, A)` samples in model space (a compiled
    engine's `infer`); without it the eager model runs the family's reference sampler."""

    def __init__(
        self,
        model: Any,
        cfg: DiffusionConfig,
        preprocessor: Any,
        postprocessor: Any,
        *,
        num_steps: int | None = None,
        seed: int = 0,
        run: Any = None,
        zero_noise: bool = False,
    ) -> None:
        from hotloop.families.diffusion.engines import DiffusionEngineShape

        self.model = model
        self.config = cfg
        self.pre, self.post = preprocessor, postprocessor
        self.num_steps = num_steps or cfg.num_inference_steps
        self.shape = DiffusionEngineShape(batch=1, num_steps=self.num_steps)
        self.seed = seed
        self.run = run
        self.zero_noise = zero_noise
        self._generator = torch.Generator().manual_seed(seed)
        self._history: dict[str, deque[torch.Tensor]] = {}
        self._observing = False
        self.reset()

    # ---- the Policy protocol -------------------------------------------------------------------------
    def reset(self) -> None:
        """A new episode: the history is empty (the next observation fills it), the noise restarts."""
        n = self.config.n_obs_steps
        self._history = {key: deque(maxlen=n) for key in self._keys()}
        self._observing = False
        self._generator.manual_seed(self.seed)

    def seed_noise(self, episode_seed: int) -> None:
        """An episode's own noise stream (`hotloop.policy`: the evaluator calls it after `reset`)."""
        self._generator.manual_seed(episode_noise_seed(self.seed, episode_seed))

    def new_session(self) -> DiffusionPolicyWrapper:
        """The same model, processors and seed with a history and noise stream of its own (one robot,
        one server connection)."""
        session = copy.copy(self)
        session._generator = torch.Generator().manual_seed(self.seed)
        session.reset()
        return session

    def observe(self, obs: dict[str, Any]) -> None:
        """This control period's observation joins the history (see the module docstring)."""
        self._push(self.frame(obs))
        self._observing = True

    @torch.inference_mode()
    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        if not self._observing:
            self._push(self.frame(obs))
        from hotloop.families.diffusion.sampling import make_noise, sample_actions
        from hotloop.models.diffusion import select_action_chunk

        model_obs = self.observation()
        noise = make_noise(self.config, self.num_steps, 1, self._generator)
        if self.zero_noise:  # drawn all the same, so the stream stays where a drawing policy's would be
            noise.zero_()
        if self.run is not None:
            sample = self.run(model_obs, noise)
        else:
            sample = sample_actions(self.model, model_obs, noise, self.num_steps)
        chunk = select_action_chunk(sample.float(), self.config)
        actions = self.post.action(chunk.clone())
        return {"actions": actions[0].float().cpu().numpy().copy()}

    @property
    def spec(self) -> Any:
        return diffusion_spec(self.config)

    @property
    def observation_spec(self) -> dict[str, Any]:
        """What a served copy accepts: each view as (H, W, 3) uint8 under `images/<view>`, the state, the
        environment state when the checkpoint reads one."""
        from hotloop.policy_spec import ArraySpec

        cfg = self.config
        out: dict[str, Any] = {}
        if cfg.image_shape is not None:
            _, h, w = cfg.image_shape
            for k in cfg.camera_keys:
                out[f"images/{view_key(k)}"] = ArraySpec((h, w, 3), "uint8")
        out["state"] = ArraySpec((cfg.state_dim,), "float32")
        if cfg.env_state_dim is not None:
            out["environment_state"] = ArraySpec((cfg.env_state_dim,), "float32")
        return out

    # ---- raw observation -> model space --------------------------------------------------------------
    def _keys(self) -> list[str]:
        cfg = self.config
        return [STATE] + ([IMAGES] if cfg.n_cameras else []) + ([ENV_STATE] if cfg.env_state_dim else [])

    def batch(self, obs: dict[str, Any]) -> dict[str, Any]:
        """A raw observation as the LeRobot batch a robot's processor would see (one frame, no batch axis):
        images float32 (3, H, W) in [0, 1] (uint8 / 255, as LeRobot's preprocess_observation), the state."""
        cfg = self.config
        if not isinstance(obs, dict) or "state" not in obs:
            raise ConfigError("obs must hold 'state' (and the camera views under 'images')")
        batch: dict[str, Any] = {STATE: _vector(obs["state"], cfg.state_dim, "state")}
        if cfg.env_state_dim is not None:
            if "environment_state" not in obs:
                raise ConfigError(
                    f"obs must hold 'environment_state' ({cfg.env_state_dim} numbers): this checkpoint "
                    "conditions on observation.environment_state"
                )
            batch[ENV_STATE] = _vector(obs["environment_state"], cfg.env_state_dim, "environment_state")
        if cfg.n_cameras:
            views = obs.get("images")
            if not isinstance(views, dict):
                raise ConfigError(
                    f"obs['images'] must be a dict of views {[view_key(k) for k in cfg.camera_keys]}"
                )
            for camera, image in zip(cfg.camera_keys, self._views(views), strict=True):
                batch[camera] = self._image(camera, image)
        return batch

    def _views(self, views: dict[str, Any]) -> list[Any]:
        """One image per camera, in config order: by name, a "*" camera taking the unclaimed views in order."""
        cfg = self.config
        names = [view_key(k) for k in cfg.camera_keys]
        free = [k for k in views if k not in names]
        out = []
        for camera, name in zip(cfg.camera_keys, names, strict=True):
            if name in views:
                out.append(views[name])
            elif not camera.startswith(IMAGE_PREFIX) and free:
                out.append(views[free.pop(0)])
            else:
                raise ConfigError(f"obs['images'] has views {sorted(views)}; this checkpoint needs {names}")
        return out

    def _image(self, camera: str, image: Any) -> torch.Tensor:
        assert self.config.image_shape is not None
        c, h, w = self.config.image_shape
        arr = np.asarray(image)
        if arr.shape != (h, w, c):
            raise ConfigError(
                f"obs['images']['{view_key(camera)}'] has shape {arr.shape}; this checkpoint takes ({h}, {w}, {c})"
            )
        arr = np.ascontiguousarray(arr) if arr.flags.writeable else arr.copy()  # a wire buffer is read-only
        x = torch.from_numpy(arr).permute(2, 0, 1).contiguous()
        if x.dtype == torch.uint8:
            x = x.to(torch.float32)
            x /= 255
            return x
        if not x.is_floating_point():
            raise ConfigError(f"obs['images']['{view_key(camera)}'] must be uint8 or float in [0, 1]")
        return x.to(torch.float32)

    def frame(self, obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One observation through the preprocessor: {state (1, S), images (1, C, 3, H, W), env (1, E)}."""
        cfg = self.config
        processed = self.pre(self.batch(obs))
        out = {STATE: processed[STATE]}
        if cfg.n_cameras:  # LeRobot stacks the cameras before queueing: (B, C, 3, H, W)
            out[IMAGES] = torch.stack([processed[k] for k in cfg.camera_keys], dim=-4)
        if cfg.env_state_dim is not None:
            out[ENV_STATE] = processed[ENV_STATE]
        return out

    def _push(self, frame: dict[str, torch.Tensor]) -> None:
        """LeRobot's populate_queues: the first frame fills the queue, later ones are appended."""
        for key, queue in self._history.items():
            while len(queue) < (queue.maxlen or 0) - 1:
                queue.append(frame[key])
            queue.append(frame[key])

    def observation(self) -> Any:
        """The history as the model's input (LeRobot's torch.stack(list(queue), dim=1))."""
        from hotloop.families.diffusion.engines import DiffusionObservation

        if not self._history[STATE]:
            raise ConfigError("the policy has seen no observation since reset()")
        stacked = {k: torch.stack(list(q), dim=1) for k, q in self._history.items()}
        return DiffusionObservation(stacked[STATE], stacked.get(IMAGES), stacked.get(ENV_STATE))

    @property
    def history(self) -> dict[str, list[torch.Tensor]]:
        """The frames the next chunk is conditioned on, oldest first (for tests and debugging)."""
        return {k: list(q) for k, q in self._history.items()}


def _vector(value: Any, dim: int, name: str) -> torch.Tensor:
    arr = np.asarray(value, dtype=np.float32).reshape(-1)
    if arr.size != dim:
        raise ConfigError(f"obs['{name}'] has {arr.size} numbers; this checkpoint takes {dim}")
    return torch.from_numpy(arr.copy())


def load_processors(folder: str | Path) -> tuple[Any, Any]:
    from hotloop.lerobot.processors import read_policy_processors

    return read_policy_processors(Path(folder))


def engine_policy(engine: Any, info: dict[str, Any], seed: int = 0) -> DiffusionPolicyWrapper:
    """A loaded artifact's policy: the processors re-read from the checkpoint folder it was compiled from,
    the engine sampling (the same history and noise as the eager wrapper)."""
    folder = info.get("checkpoint")
    if not isinstance(folder, str) or not Path(folder).is_dir():
        from hotloop.errors import CheckpointError

        raise CheckpointError(
            f"{engine.path / 'manifest.json'}: the policy entry names checkpoint folder {folder!r}, which "
            "is not there; its processor files (policy_preprocessor.json, ...) are read from it"
        )
    pre, post = load_processors(folder)

    def run(obs: Any, noise: torch.Tensor) -> torch.Tensor:
        return engine.infer(obs, noise)  # type: ignore[no-any-return]

    return DiffusionPolicyWrapper(
        engine.model, engine.cfg, pre, post, num_steps=engine.shape.num_steps, seed=seed, run=run,
        zero_noise=bool(info.get("zero_noise", False)),
    )  # fmt: skip
