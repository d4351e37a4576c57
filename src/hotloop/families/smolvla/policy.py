"""`SmolVLAPolicy`: a SmolVLA behind the `Policy` protocol, robot units in and robot units out.

    obs {"images": {camera: (H, W, 3) uint8}, "state": (state_dim,), "prompt": text}
      -> LeRobot's batch (images float in [0, 1] channels first, as `prepare_observation_for_inference`)
      -> the checkpoint's saved preprocessor (newline, tokenizer, normaliser: `hotloop.lerobot`)
      -> the model (eager, bit for bit with LeRobot; or a compiled engine) -> n_action_steps actions
      -> the saved postprocessor (unnormaliser) -> {"actions": (n_action_steps, action_dim)}

A named random-weight target has no processors: its state and actions are the model's own (identity) and
its prompt is token ids ("prompt_tokens", default a fixed few). RTC keys in the observation
(`hotloop.realtime.rtc`) select a sampler of `hotloop.families.smolvla.rtc`; the answer then carries
`rtc_guided` and `rtc_mode`, as `hotloop.families.pi.policy.PiPolicy` answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families.smolvla.observation import SmolVLAObservation, batch_observation
from hotloop.families.smolvla.rtc import (
    RTCSettings,
    Velocity,
    guided_sample,
    prefix_sample,
    soft_prefix_sample,
)
from hotloop.models.smolvla import LANG_MASK, LANG_TOKENS, STATE, SmolVLAModel
from hotloop.models.smolvla_config import SmolVLAConfig
from hotloop.policy import episode_noise_seed

IMAGE_PREFIX = "observation.images."


def camera_name(key: str) -> str:
    """The name a robot gives a camera: `observation.images.top` -> `top`."""
    return (
        key.removeprefix(IMAGE_PREFIX) if key.startswith(IMAGE_PREFIX) else key.removeprefix("observation.")
    )


@dataclass(frozen=True)
class PolicySettings:
    """What a SmolVLA policy needs beside its model: raw camera sizes (the spec's), processors (None for a
    named random-weight target), RTC settings, default prompt ids, the meaning of its actions."""

    camera_sizes: dict[str, tuple[int, int]]
    processors: tuple[Any, Any] | None = None
    rtc: RTCSettings = field(default_factory=RTCSettings)
    default_prompt_tokens: tuple[int, ...] = (1, 2, 3)
    action_meaning: str = "any"
    # the flow starts at x = 0 instead of a draw (an artifact made with the recipe step `zero-noise`)
    zero_noise: bool = False


def policy_spec(cfg: SmolVLAConfig, settings: PolicySettings) -> Any:
    """What the policy consumes: every camera by name at its raw size, the robot state, a text prompt when it
    has a tokenizer; it returns the n_action_steps actions LeRobot's select_action would queue."""
    from hotloop.policy_spec import ImageSpec, PolicySpec

    images = tuple(ImageSpec(camera_name(k), *settings.camera_sizes[k]) for k in cfg.camera_keys)
    return PolicySpec.named_views(
        images,
        state_dim=cfg.state_dim,
        action_dim=cfg.action_dim,
        action_meaning=settings.action_meaning,
        horizon=cfg.n_action_steps,
        prompt=settings.processors is not None,
    )


def _image(name: str, value: Any) -> Tensor:
    """(H, W, 3) uint8 or float in [0, 1] -> (1, 3, H, W) float32 in [0, 1] (LeRobot's `/ 255` + permute)."""
    arr = np.asarray(value)
    if arr.ndim != 3 or arr.shape[-1] != 3 or 0 in arr.shape:
        raise ConfigError(f"obs['images'][{name!r}] must be (H, W, 3) RGB; got shape {arr.shape}")
    if arr.dtype == np.uint8:
        x = torch.from_numpy(np.array(arr, dtype=np.uint8)).type(torch.float32) / 255
    elif arr.dtype.kind == "f":
        if not (float(arr.min()) >= 0.0 and float(arr.max()) <= 1.0):
            raise ConfigError(
                f"obs['images'][{name!r}] floats must lie in [0, 1] (0-255 pixels? pass them as uint8)"
            )
        x = torch.from_numpy(np.array(arr, dtype=np.float32))
    else:
        raise ConfigError(
            f"obs['images'][{name!r}] must be uint8 pixels or floats in [0, 1] (got {arr.dtype})"
        )
    return x.permute(2, 0, 1).contiguous()[None]


class SmolVLAPolicy:
    """Raw observation -> LeRobot preprocessor -> SmolVLA -> postprocessor -> robot actions.

    `engine`: a loaded artifact (`hotloop.runtime.engine.Engine`) that samples instead of the eager model
    (same preprocessing, noise stream and postprocessing). `seed` makes the noise reproducible; `reset`
    restarts it.
    """

    def __init__(
        self,
        model: SmolVLAModel,
        cfg: SmolVLAConfig,
        settings: PolicySettings,
        seed: int = 0,
        num_steps: int | None = None,
        engine: Any = None,
    ) -> None:
        if num_steps is not None and (
            isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1
        ):
            raise ConfigError(f"SmolVLAPolicy num_steps must be a positive integer (got {num_steps!r})")
        self.model, self.config, self.settings = model, cfg, settings
        self.num_steps = num_steps if num_steps is not None else cfg.num_steps
        self.engine = engine
        if engine is not None:
            self.num_steps = engine.shape.num_steps
        self.seed = seed
        self._generator = torch.Generator().manual_seed(seed)
        self._verify_noise: Tensor | None = None  # the draft check's fixed start (`_draft`)
        pre = settings.processors[0] if settings.processors is not None else None
        self._tokenize = self._find_tokenizer(pre)
        from hotloop.lerobot.steps import Normalize

        self._action_normalizers = (
            [s for s in pre.find(Normalize) if not s.inverse] if pre is not None else []
        )

    @staticmethod
    def _find_tokenizer(pre: Any) -> Any:
        from hotloop.lerobot.steps import Tokenize

        steps = pre.find(Tokenize) if pre is not None else []
        return steps[0] if steps else None

    @property
    def supports_rtc(self) -> bool:
        """Eager: always. A compiled plan: when it kept the step engine (the RTC samplers drive it)."""
        if self.engine is None:
            return True
        pipelines = getattr(self.engine, "pipelines", None) or {0: self.engine.pipeline}
        return all(getattr(p, "has_step", False) for p in pipelines.values())

    @property
    def supports_draft(self) -> bool:
        """`--strategy draft` checks a chunk with the velocity the RTC samplers drive: where RTC runs."""
        return self.supports_rtc

    @property
    def generator(self) -> torch.Generator:
        return self._generator

    def reset(self) -> None:
        self._generator.manual_seed(self.seed)

    def seed_noise(self, episode_seed: int) -> None:
        """An episode's own noise stream (`hotloop.policy`: the evaluator calls it after `reset`)."""
        self._generator.manual_seed(episode_noise_seed(self.seed, episode_seed))

    @property
    def spec(self) -> Any:
        return policy_spec(self.config, self.settings)

    @property
    def observation_spec(self) -> dict[str, Any]:
        """What a served copy accepts: each camera as "images/<name>" (H, W, 3) uint8, the state, the prompt
        as text (a checkpoint's) or token ids (a named target's), and the RTC keys when it applies them."""
        from hotloop.policy_spec import ArraySpec
        from hotloop.realtime.rtc import rtc_observation_spec

        cfg = self.config
        out: dict[str, Any] = {
            f"images/{camera_name(k)}": ArraySpec((*self.settings.camera_sizes[k], 3), "uint8")
            for k in cfg.camera_keys
        }
        out["state"] = ArraySpec((cfg.state_dim,), "float32")
        if self._tokenize is not None:
            out["prompt"] = ArraySpec((), "str", optional=True)
        else:
            out["prompt_tokens"] = ArraySpec((-1,), "int64", optional=True)
        if self.supports_rtc:
            out.update(rtc_observation_spec(cfg.action_dim))
        return out

    # ---- raw observation -> model space --------------------------------------------------------------
    def _cameras(self, images: Any) -> dict[str, Tensor]:
        """{LeRobot camera key: (1, 3, H, W)} from a dict keyed by camera name (or LeRobot key) or a
        (V, H, W, 3) array in config.json's camera order; any other count of cameras is refused by name."""
        keys = self.config.camera_keys
        names = [camera_name(k) for k in keys]
        if isinstance(images, Mapping):
            given = [str(k) for k in images]
            found = {
                k: next((g for g in given if g in (k, n)), None) for k, n in zip(keys, names, strict=True)
            }
            if len(given) != len(keys) or any(g is None for g in found.values()):
                raise ConfigError(
                    f"obs['images'] holds {len(given)} camera(s) {given}; this policy takes {len(keys)}: "
                    f"{', '.join(names)}"
                )
            return {k: _image(camera_name(k), images[g]) for k, g in found.items()}
        arr = np.asarray(images)
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4 or arr.shape[0] != len(keys):
            raise ConfigError(
                f"obs['images'] holds {arr.shape[0] if arr.ndim == 4 else 'no'} camera(s) (shape {arr.shape}); "
                f"this policy takes {len(keys)}: {', '.join(names)} (a dict name -> (H, W, 3) or a (V, H, W, 3) array)"
            )
        return {k: _image(n, arr[i]) for i, (n, k) in enumerate(zip(names, keys, strict=True))}

    def _state(self, obs: Mapping[str, Any]) -> Tensor:
        cfg = self.config
        if "state" not in obs:
            raise ConfigError(f"obs must hold 'state', a vector of {cfg.state_dim} numbers")
        try:
            state = np.asarray(obs["state"], dtype=np.float32)
        except (TypeError, ValueError):
            raise ConfigError(
                f"obs['state'] must be a vector of numbers (got {type(obs['state']).__name__})"
            ) from None
        if state.ndim != 1 or state.shape[0] != cfg.state_dim:
            raise ConfigError(f"obs['state'] has shape {state.shape}; this policy takes ({cfg.state_dim},)")
        if not np.isfinite(state).all():
            raise ConfigError("obs['state'] holds NaN or infinite values")
        return torch.from_numpy(state.copy())[None]

    def _prompt_tokens(self, obs: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        """Token ids of a named target's prompt (no tokenizer): obs['prompt_tokens'] or the default ids."""
        cfg = self.config
        if "prompt" in obs and obs["prompt"] and "prompt_tokens" not in obs:
            raise ConfigError(
                "obs has a text 'prompt' but this policy has no tokenizer; pass 'prompt_tokens'"
            )
        ids = np.asarray(obs.get("prompt_tokens", self.settings.default_prompt_tokens)).reshape(-1)
        if ids.size and ids.dtype.kind not in "iu":
            raise ConfigError(f"obs['prompt_tokens'] must be integer token ids (got {ids.dtype})")
        limit = cfg.tokenizer.max_length
        if ids.size > limit:
            raise ConfigError(
                f"the prompt has {ids.size} tokens; this policy takes at most {limit} (its tokenizer max_length)"
            )
        if ids.size and (ids.min() < 0 or ids.max() >= cfg.vlm.vocab_size):
            raise ConfigError(f"prompt token ids must lie in [0, {cfg.vlm.vocab_size})")
        tokens = torch.from_numpy(ids.astype(np.int64))[None]
        return tokens, torch.ones_like(tokens, dtype=torch.bool)

    def check_prompt(self, text: str) -> None:
        """Refuse a prompt longer than the tokenizer step's max_length (LeRobot would cut it silently)."""
        step = self._tokenize
        task = text if text.endswith("\n") else f"{text}\n"  # the newline step runs first
        ids, _ = step.tokenizer.encode([task], max_length=step.max_length, padding="do_not_pad",
                                       padding_side="right", truncation=False)  # fmt: skip
        if ids.shape[1] > step.max_length:
            raise ConfigError(
                f"the prompt {text[:60]!r}{'...' if len(text) > 60 else ''} is {ids.shape[1]} tokens; the "
                f"checkpoint's tokenizer step takes at most max_length {step.max_length}: shorten it"
            )

    def lerobot_batch(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """The raw observation as the batch LeRobot's preprocessor receives."""
        if not isinstance(obs, Mapping) or "images" not in obs:
            raise ConfigError("obs must be a dict with 'images' {camera: (H, W, 3)}, 'state' and a 'prompt'")
        batch: dict[str, Any] = dict(self._cameras(obs["images"]))
        batch[STATE] = self._state(obs)
        if self._tokenize is not None:
            prompt = obs.get("prompt", "")
            if not isinstance(prompt, str):
                raise ConfigError(f"obs['prompt'] must be text (got {type(prompt).__name__})")
            self.check_prompt(prompt)
            batch["task"] = prompt
        return batch

    def model_batch(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """Raw observation -> what `predict_action_chunk` receives (after the preprocessor)."""
        batch = self.lerobot_batch(obs)
        if self.settings.processors is None:
            batch[LANG_TOKENS], batch[LANG_MASK] = self._prompt_tokens(obs)
            return batch
        return dict(self.settings.processors[0](batch))

    def observation(self, obs: Mapping[str, Any]) -> SmolVLAObservation:
        """Raw observation -> model-space inputs (batch 1); an engine's prompt padded to its slots."""
        model_batch = self.model_batch(obs)
        slots = self.config.tokenizer.max_length if self.engine is not None else None
        pad_id = 0
        if self._tokenize is not None and self._tokenize.tokenizer.pad_id is not None:
            pad_id = int(self._tokenize.tokenizer.pad_id)
        return batch_observation(self.config, model_batch, slots, pad_id)

    # ---- sampling ----------------------------------------------------------------------------------------
    def _noise(self) -> Tensor:
        cfg = self.config
        noise = torch.randn(1, cfg.chunk_size, cfg.max_action_dim, generator=self._generator)
        return noise.zero_() if self.settings.zero_noise else noise

    def _velocity(self, obs: SmolVLAObservation) -> Velocity:
        if self.engine is None:
            from hotloop.families.smolvla.sampling import eager_velocity, encode

            k, v, pad = encode(self.model, obs)
            return eager_velocity(self.model, k, v, pad)
        checked = self.engine.validate(obs)
        pipeline = self.engine.pipeline
        if hasattr(pipeline, "bucket_for"):
            pipeline = pipeline.pipelines[pipeline.bucket_for(checked)]
        values = pipeline.encode(checked)
        return lambda x, t: pipeline.velocity(values, x, t).clone()

    def _plain(self, obs: SmolVLAObservation, noise: Tensor) -> Tensor:
        if self.engine is not None:
            return self.engine.infer(obs, noise).clone()  # type: ignore[no-any-return]
        from hotloop.families.smolvla.sampling import sample_actions

        return sample_actions(self.model, obs, noise, self.num_steps, validate=False)

    def to_model_actions(self, actions: np.ndarray) -> Tensor:
        """Robot-space actions (n, action_dim) -> model space (the preprocessor's action normalisation)."""
        from hotloop.lerobot.features import FeatureType

        x = torch.from_numpy(np.array(actions, dtype=np.float32))
        for step in self._action_normalizers:
            x = step.apply(x, "action", FeatureType.ACTION)
        return x

    def to_robot_actions(self, actions: Tensor) -> np.ndarray:
        """Model-space actions (1, n, action_dim) -> robot units (the postprocessor)."""
        if self.settings.processors is not None:
            actions = self.settings.processors[1].action(actions)
        return actions[0].float().cpu().numpy().astype(np.float32)

    @torch.no_grad()
    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        """A chunk of n_action_steps robot actions; with RTC keys, sampled onto the executing chunk and
        answered with `rtc_guided` / `rtc_mode`."""
        from hotloop.realtime.rtc import GUIDED_KEY, MODE_KEY, guidance_inputs, guidance_mode

        cfg = self.config
        model_obs = self.observation(obs)
        guidance = guidance_inputs(obs)
        mode = guidance_mode(obs)
        noise = self._noise()
        draft: Any = None
        if guidance is None:
            chunk = self._plain(model_obs, noise)
        else:
            if not self.supports_rtc:
                raise ConfigError(
                    "this plan runs the denoise loop as one graph, so it cannot take RTC guidance; compile "
                    "with the step engine or use --strategy async"
                )
            if mode == "draft":
                from hotloop.realtime.draft import tolerance_of

                chunk, draft = self._draft(model_obs, noise, guidance, tolerance_of(obs))
            else:
                chunk = self._rtc(model_obs, noise, obs, guidance, mode)
        rows = cfg.n_action_steps if draft is None else draft.kept
        actions = chunk[:, :rows, : cfg.action_dim]
        out: dict[str, Any] = {"actions": self.to_robot_actions(actions)}
        if guidance is not None:
            out[GUIDED_KEY] = True
            out[MODE_KEY] = mode
        if draft is not None:
            from hotloop.realtime.draft import DRAFT_KEY

            out[DRAFT_KEY] = draft.stats()
        return out

    def draft_cost(self) -> Any:
        """A `--strategy draft` call's cost model (`hotloop.realtime.draft.DraftCost`): the analytic FLOPs of
        `hotloop.families.smolvla.roofline`. SmolVLA embeds the time per chunk token in every step, so a
        step with a time per token costs what a step with one time does."""
        from hotloop.families.smolvla.roofline import smolvla_stage_work
        from hotloop.realtime.draft import DraftCost

        work = smolvla_stage_work(self.config, {}, num_steps=1)
        step = work["denoise"].flops
        return DraftCost(work["vision"].flops + work["prefix"].flops, step, step, self.num_steps)

    def _draft(
        self,
        model_obs: SmolVLAObservation,
        noise: Tensor,
        guidance: tuple[np.ndarray, int, float],
        tolerance: float,
    ) -> tuple[Tensor, Any]:
        """`--strategy draft` (`hotloop.realtime.draft`): the executing chunk's rows, padded to the horizon,
        checked by the velocity (eager or the plan's step engine) from a fixed draw; with enough rows
        accepted they are the answer, else `rtc-soft`'s sampler runs with the accepted rows held. Vision
        and prefix run once (`_velocity`)."""
        from hotloop.families.smolvla.rtc import soft_prefix_sample
        from hotloop.realtime.draft import DraftOutcome, draft_rows, min_rows, verify
        from hotloop.realtime.rtc import prefix_weights

        cfg = self.config
        prev, delay, _ = guidance
        if prev.shape[1] != cfg.action_dim:
            raise ConfigError(
                f"rtc_prev_actions has {prev.shape[1]} action columns; this policy has {cfg.action_dim}"
            )
        horizon = cfg.n_action_steps
        n = max(1, min(len(prev), horizon))
        d = max(0, min(int(delay), n, horizon))
        draft = torch.zeros(1, cfg.chunk_size, cfg.max_action_dim)
        draft[0, :horizon, : cfg.action_dim] = self.to_model_actions(draft_rows(prev, horizon))
        velocity = self._velocity(model_obs)
        if self._verify_noise is None:  # one fixed draw (seed 0), the same for every call and policy seed
            gen = torch.Generator().manual_seed(0)
            self._verify_noise = torch.randn(1, cfg.chunk_size, cfg.max_action_dim, generator=gen)
        check = verify(velocity, draft, self._verify_noise, horizon, cfg.action_dim, tolerance)
        speculative = check.accepted >= min_rows(horizon, d)
        outcome = DraftOutcome(
            offered=min(len(prev), horizon),
            horizon=horizon,
            accepted=check.accepted,
            speculative=speculative,
            evals=check.evals + (0 if speculative else self.num_steps),
            work=self.draft_cost().fraction(check.evals, loop=not speculative),
            kept=check.accepted if speculative else horizon,
        )
        if speculative:
            return draft, outcome
        hold = max(d, min(check.accepted, n))
        target = torch.zeros(1, cfg.chunk_size, cfg.max_action_dim)
        target[0, :n, : cfg.action_dim] = self.to_model_actions(prev[:n])
        weights = torch.zeros(cfg.chunk_size)
        weights[:horizon] = torch.from_numpy(prefix_weights(hold, n, horizon)).float()
        return soft_prefix_sample(velocity, noise, target, weights, self.num_steps), outcome

    def _rtc(
        self,
        model_obs: SmolVLAObservation,
        noise: Tensor,
        obs: Mapping[str, Any],
        guidance: tuple[np.ndarray, int, float],
        mode: str,
    ) -> Tensor:
        from hotloop.realtime.rtc import MAX_GUIDANCE_WEIGHT_KEY, prefix_weights

        cfg = self.config
        prev, delay, beta = guidance
        if prev.shape[1] != cfg.action_dim:
            raise ConfigError(
                f"rtc_prev_actions has {prev.shape[1]} action columns; this policy has {cfg.action_dim}"
            )
        horizon = cfg.n_action_steps
        n = min(len(prev), horizon)
        target = torch.zeros(1, cfg.chunk_size, cfg.max_action_dim)
        target[0, :n, : cfg.action_dim] = self.to_model_actions(prev[:n])
        velocity = self._velocity(model_obs)
        if mode == "guided":
            given = beta if MAX_GUIDANCE_WEIGHT_KEY in obs else None
            return guided_sample(
                velocity, noise, target[:, :n, : cfg.action_dim], max(0, int(delay)), self.settings.rtc,
                self.num_steps, given,
            )  # fmt: skip
        d = max(0, min(int(delay), n, horizon))
        if mode == "prefix":
            return prefix_sample(velocity, noise, target, d, self.num_steps)
        weights = torch.zeros(cfg.chunk_size)
        weights[:horizon] = torch.from_numpy(prefix_weights(d, n, horizon)).float()
        return soft_prefix_sample(velocity, noise, target, weights, self.num_steps)
