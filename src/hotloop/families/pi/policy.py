"""`PiPolicy`: a pi0 / pi0.5 model behind the `Policy` protocol (raw observation in, robot actions out).

Preprocessing mirrors LeRobot's: images resized with padding to the model size and mapped to [-1, 1],
state normalised (mean/std or quantiles) and zero-padded, pi0.5's state discretized into the prompt;
actions cropped to the robot's dimension and unnormalised.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from hotloop.errors import ConfigError
from hotloop.families.pi.sampling import PiObservation, SampleOptions, begin_sampling, sample_actions
from hotloop.models.configs import PiConfig
from hotloop.models.pi0 import PiModel, PrefixCache, state_prompt_tokens
from hotloop.policy import episode_noise_seed


@dataclass(frozen=True)
class Stats:
    """Per-dimension statistics of one quantity (state or actions); any may be None."""

    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    q01: np.ndarray | None = None
    q99: np.ndarray | None = None


@dataclass(frozen=True)
class NormStats:
    """Normalisation of state and actions. `mode`: "mean_std" (pi0), "quantiles" (pi0.5) or "identity"."""

    state: Stats | None = None
    actions: Stats | None = None
    mode: Literal["mean_std", "quantiles", "identity"] = "mean_std"

    def _pair(self, which: Literal["state", "actions"], d: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(mean, std) or (q01, q99) cut to the first d entries; None when nothing is normalised."""
        stats = getattr(self, which)
        if self.mode == "identity" or stats is None:
            return None
        if self.mode == "mean_std":
            assert stats.mean is not None and stats.std is not None, f"{which} mean/std missing"
            return stats.mean[:d], stats.std[:d]
        assert stats.q01 is not None and stats.q99 is not None, f"{which} q01/q99 missing"
        return stats.q01[:d], stats.q99[:d]

    def normalize(self, x: np.ndarray, which: Literal["state", "actions"]) -> np.ndarray:
        pair = self._pair(which, x.shape[-1])
        if pair is None:
            return x
        if self.mode == "mean_std":
            mean, std = pair
            return (x - mean) / (std + 1e-6)
        lo, hi = pair
        return 2.0 * (x - lo) / (hi - lo + 1e-6) - 1.0

    def unnormalize(self, x: np.ndarray, which: Literal["state", "actions"]) -> np.ndarray:
        pair = self._pair(which, x.shape[-1])
        if pair is None:
            return x
        if self.mode == "mean_std":
            mean, std = pair
            return x * (std + 1e-6) + mean
        lo, hi = pair
        return (x + 1.0) / 2.0 * (hi - lo + 1e-6) + lo


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...


def resize_with_pad(images: torch.Tensor, size: int) -> torch.Tensor:
    """(N, 3, H, W) in [0, 1] -> (N, 3, size, size): keep the aspect ratio, pad with 0 (black) centred,
    like tf.image.resize_with_pad, which openpi replicates."""
    h, w = images.shape[-2:]
    if (h, w) == (size, size):
        return images
    ratio = max(h / size, w / size)
    nh, nw = int(h / ratio), int(w / ratio)
    resized = F.interpolate(images, size=(nh, nw), mode="bilinear", align_corners=False)
    top, left = (size - nh) // 2, (size - nw) // 2
    return F.pad(resized, (left, size - nw - left, top, size - nh - top), value=0.0)


class PiPolicy:
    """obs {"images": (V, H, W, 3) uint8 or float in [0, 1], "state": (S,), "prompt_tokens" or "prompt"}
    -> {"actions": (horizon, action_dim) float32}.

    `tokenizer` (sentencepiece-like with `encode`) turns a text "prompt"; without one, "prompt_tokens"
    (ids) or `default_prompt_tokens` are used. pi0.5 appends the discretized state to the prompt ids
    (`state_prompt_tokens`). `seed` makes the noise reproducible: `reset()` restarts the generator.
    """

    # It samples with RTC guidance or a given prefix (`rtc_sample`) when asked, and checks a draft chunk
    # with its velocity network (`draft_sample`, `--strategy draft`), the executing chunk's or a one-step
    # student's (`use_draft_student`, `--draft-from`).
    supports_rtc = True
    supports_draft = True

    def __init__(
        self,
        model: PiModel | None,
        config: PiConfig,
        tokenizer: Tokenizer | None = None,
        norm_stats: NormStats | None = None,
        action_dim: int | None = None,
        horizon: int | None = None,
        default_prompt_tokens: list[int] | None = None,
        num_steps: int | None = None,
        seed: int = 0,
    ) -> None:
        for name, value in (("action_dim", action_dim), ("horizon", horizon), ("num_steps", num_steps)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"PiPolicy {name} must be a positive integer (got {value!r})")
        # None behind a lean artifact's engine (`hotloop.runtime.lean_load`): the engine samples, and the
        # eager paths below, which need the model, are never taken (`EnginePiPolicy`).
        self.model = model.eval() if model is not None else None
        self.config = config
        self.tokenizer = tokenizer
        self.norm_stats = norm_stats or NormStats(mode="identity")
        self.action_dim = action_dim or config.max_action_dim
        self.horizon = horizon or config.chunk_size
        if self.action_dim > config.max_action_dim or self.horizon > config.chunk_size:
            raise ConfigError(
                f"PiPolicy action_dim/horizon ({self.action_dim}/{self.horizon}) exceed the model's "
                f"max_action_dim/chunk_size ({config.max_action_dim}/{config.chunk_size})"
            )
        self.default_prompt_tokens = list(default_prompt_tokens or [])
        self.num_steps = num_steps
        self.seed = seed
        weight = model.action_in_proj.weight if model is not None else None
        # An engine whose runners run from compiled files has no torch model, or keeps it on meta (no
        # storage, `hotloop.runtime.engine.release_weights`); its observations are built on the CPU.
        self.device = torch.device("cpu") if weight is None or weight.is_meta else weight.device
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self._cache = model.allocate_cache(batch=1) if model is not None else None
        self._verify_noise: torch.Tensor | None = None  # `_fixed_noise`, drawn at the first draft check
        # `--draft-from STUDENT`: the one-step student whose chunk is the draft (`use_draft_student`)
        self.draft_student: Any = None

    @property
    def generator(self) -> torch.Generator:
        """The noise stream `infer` draws from (restarted by `reset`)."""
        return self._generator

    @property
    def eager_model(self) -> PiModel:
        """The model the eager paths sample with (an engine-backed policy of a lean artifact has none)."""
        if self.model is None:
            raise ConfigError("this policy runs a compiled engine only: it has no eager model to sample with")
        return self.model

    @property
    def cache(self) -> PrefixCache:
        """The preallocated prefix cache `infer` fills (batch 1)."""
        assert self._cache is not None, "an engine-backed policy has no eager prefix cache"
        return self._cache

    def reset(self) -> None:
        self._generator.manual_seed(self.seed)

    def seed_noise(self, episode_seed: int) -> None:
        """An episode's own noise stream (`hotloop.policy`: the evaluator calls it after `reset`)."""
        self._generator.manual_seed(episode_noise_seed(self.seed, episode_seed))

    @property
    def observation_spec(self) -> dict[str, Any]:
        """What a served copy of it accepts (`hotloop.policy_spec.ArraySpec` per key): the views as one
        uint8 array, the state at the length it declares (not the model's padded width: pi0.5 writes each
        entry as a prompt token, so a small model cannot take max_state_dim of them), and the RTC keys when
        it applies them (a compiled engine does not)."""
        from hotloop.policy_spec import ArraySpec
        from hotloop.realtime.rtc import rtc_observation_spec

        cfg = self.config
        size = cfg.image_side
        return {
            "images": ArraySpec((cfg.views, size, size, 3), "uint8"),
            "state": ArraySpec((self.spec.state_dim,), "float32"),
            **(rtc_observation_spec(self.spec.action_dim) if self.supports_rtc else {}),
        }

    @property
    def spec(self) -> Any:
        """What it consumes (see hotloop.policy_spec): up to `views` square views of any name (absent
        ones are masked, so one is enough), the state at the normalised or model size (pi0.5: no more
        than fits in the prompt beside the default prompt ids, one token per entry), no text prompt
        without a tokenizer; the actions' meaning is unknown here ("any")."""
        return pi_policy_spec(
            self.config,
            self.norm_stats,
            self.action_dim,
            self.horizon,
            self.default_prompt_tokens,
            prompt=self.tokenizer is not None,
        )

    def _images(self, images: Any) -> tuple[torch.Tensor, torch.Tensor]:
        arr = np.asarray(images)
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4 or arr.shape[-1] != 3 or 0 in arr.shape:
            raise ConfigError(f"obs['images'] must be (views, H, W, 3) RGB; got shape {arr.shape}")
        v = arr.shape[0]
        if v > self.config.views:
            raise ConfigError(
                f"obs['images'] has {v} camera views; the model takes at most {self.config.views}"
            )
        if arr.dtype == np.uint8:
            x = torch.from_numpy(arr.astype(np.float32) / 255.0)
        elif arr.dtype.kind == "f":
            lo, hi = float(arr.min()), float(arr.max())
            if not (lo >= 0.0 and hi <= 1.0):  # also catches NaN
                hint = (
                    " (0-255 pixels? pass them as uint8)"
                    if hi > 1.0
                    else " ([-1, 1]? map with (x + 1) / 2)"
                    if lo >= -1.0
                    else ""
                )
                raise ConfigError(
                    f"obs['images'] floats must lie in [0, 1]; found values in [{lo:g}, {hi:g}]{hint}"
                )
            x = torch.from_numpy(arr.astype(np.float32))
        else:
            raise ConfigError(f"obs['images'] must be uint8 pixels or floats in [0, 1] (got {arr.dtype})")
        x = resize_with_pad(x.permute(0, 3, 1, 2), self.config.image_side) * 2.0 - 1.0
        # Absent views are filled with -1 (black) and masked out, as LeRobot does.
        full = torch.full((self.config.views, *x.shape[1:]), -1.0)
        full[:v] = x
        mask = torch.arange(self.config.views) < v
        return full[None].to(self.device), mask[None].to(self.device)

    def _prompt_ids(self, obs: dict[str, Any]) -> list[int]:
        if "prompt_tokens" in obs:
            ids = np.asarray(obs["prompt_tokens"])
            if ids.size and ids.dtype.kind not in "iu":
                raise ConfigError(f"obs['prompt_tokens'] must be integer token ids (got {ids.dtype})")
            ids = ids.reshape(-1)
        elif "prompt" in obs:
            if self.tokenizer is None:
                raise ConfigError(
                    "obs has a text 'prompt' but this policy has no tokenizer; pass 'prompt_tokens'"
                )
            ids = np.asarray(self.tokenizer.encode(str(obs["prompt"])), dtype=np.int64)
        else:
            ids = np.asarray(self.default_prompt_tokens, dtype=np.int64)
        # pi0.5's last 256 ids stand for the state bins (see state_prompt_tokens); task ids stay below.
        top = self.config.vocab_size - (256 if self.config.pi05 else 0)
        if ids.size and (ids.min() < 0 or ids.max() >= top):
            raise ConfigError(
                f"prompt token ids must lie in [0, {top}) for this model; found [{ids.min()}, {ids.max()}]"
            )
        return [int(i) for i in ids]

    def _state(self, obs: dict[str, Any]) -> np.ndarray:
        raw = obs.get("state", np.zeros(0))
        try:
            state = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError):
            raise ConfigError(
                f"obs['state'] must be a vector of numbers (got {type(raw).__name__})"
            ) from None
        if state.ndim != 1:
            raise ConfigError(f"obs['state'] must be a 1-D vector; got shape {state.shape}")
        if state.shape[0] > self.config.max_state_dim:
            raise ConfigError(
                f"obs['state'] has {state.shape[0]} entries; the model takes at most {self.config.max_state_dim}"
            )
        if not np.isfinite(state).all():
            raise ConfigError("obs['state'] holds NaN or infinite values")
        return state

    def observation(self, obs: dict[str, Any]) -> PiObservation:
        """Raw observation -> model-space inputs (batch 1); a bad input is named in a ConfigError."""
        cfg = self.config
        if not isinstance(obs, Mapping) or "images" not in obs:
            raise ConfigError("obs must be a dict with 'images' (views, H, W, 3), 'state' and a prompt")
        images, image_masks = self._images(obs["images"])
        state = self.norm_stats.normalize(self._state(obs), "state")
        ids = self._prompt_ids(obs)
        used = len(ids) + (state.shape[-1] if cfg.pi05 else 0)
        if used > cfg.max_token_len:
            what = f"{len(ids)} prompt ids + {state.shape[-1]} state bins" if cfg.pi05 else f"{len(ids)} ids"
            raise ConfigError(
                f"the prompt needs {used} tokens ({what}); the model takes at most {cfg.max_token_len}: "
                "shorten the prompt"
            )
        if cfg.pi05:
            tokens, mask = state_prompt_tokens(ids, np.clip(state, -1.0, 1.0), cfg)
        else:
            tokens = np.zeros(cfg.max_token_len, dtype=np.int64)
            mask = np.zeros(cfg.max_token_len, dtype=bool)
            tokens[: len(ids)], mask[: len(ids)] = ids, True
        padded = np.zeros(cfg.max_state_dim, dtype=np.float32)
        padded[: state.shape[-1]] = state
        return PiObservation(
            images=images,
            image_masks=image_masks,
            lang_tokens=torch.from_numpy(tokens)[None].to(self.device),
            lang_masks=torch.from_numpy(mask)[None].to(self.device),
            state=torch.from_numpy(padded)[None].to(self.device),
        )

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        """Sample a chunk; with RTC guidance keys in `obs` (`hotloop.realtime.rtc`), inpaint it onto
        the previous chunk's unexecuted actions and answer `rtc_guided: True`."""
        from hotloop.realtime.rtc import GUIDED_KEY, MODE_KEY, guidance_inputs, guidance_mode

        model_obs = self.observation(obs)
        guidance = guidance_inputs(obs)
        mode = guidance_mode(obs)
        draft: Any = None
        if guidance is None:
            # `observation` built the inputs to the model's shapes and checked the raw values: no second check.
            chunk = sample_actions(
                self.eager_model,
                model_obs,
                num_steps=self.num_steps,
                generator=self._generator,
                cache=self._cache,
                validate=False,
            )
        elif mode == "draft":
            from hotloop.realtime.draft import tolerance_of

            chunk, draft = self.draft_sample(
                model_obs, guidance, lambda a: a, tolerance_of(obs), generator=self._generator
            )
        else:
            chunk = self.rtc_sample(model_obs, guidance, mode, lambda a: a, generator=self._generator)
        rows = self.horizon if draft is None else draft.kept
        actions = chunk[0, :rows, : self.action_dim].cpu().numpy()
        out: dict[str, Any] = {"actions": self.norm_stats.unnormalize(actions, "actions").astype(np.float32)}
        if guidance is not None:
            out[GUIDED_KEY] = True
            out[MODE_KEY] = mode
        if draft is not None:
            from hotloop.realtime.draft import DRAFT_KEY

            out[DRAFT_KEY] = draft.stats()
        return out

    def draft_cost(self, num_steps: int) -> Any:
        """What a `--strategy draft` call's work is counted in (`hotloop.realtime.draft.DraftCost`): the
        analytic FLOPs of `hotloop.families.pi.roofline`, machine-independent. A check evaluation has one
        flow time for the chunk; the loop's (`soft_prefix_sample_actions`) has one per token, which
        pi0.5 runs through its time MLP and adaRMS projections once per token (pi0's time MLP runs on
        every chunk row anyway)."""
        from hotloop.families.pi.roofline import pi_stage_work
        from hotloop.realtime.draft import DraftCost

        work = pi_stage_work(self.config, "float32", num_steps=1)
        bare = pi_stage_work(self.config, "float32", num_steps=1, time_conditioning=False)["denoise"].flops
        step = work["denoise"].flops
        token_step = bare + self.config.chunk_size * (step - bare) if self.config.pi05 else step
        return DraftCost(work["vision"].flops + work["prefix"].flops, step, token_step, num_steps)

    def use_draft_student(self, student: Any) -> None:
        """Propose the drafts of `--strategy draft` with a one-step student (`--draft-from`): `student` is
        its artifact as `hotloop.runtime.draft_student.read_student` read it; it is held beside this
        policy's model, sharing its vision and VLM (`hotloop.families.pi.draft_student`: refused by name,
        a ConfigError, unless its sizes and prefix tensors are this model's)."""
        from hotloop.families.pi.draft_student import pi_draft_student
        from hotloop.realtime.draft import draft_refusal, student_refusal

        if not self.supports_draft or self.model is None:
            raise ConfigError(student_refusal(str(student.path), draft_refusal("this policy")))
        self.draft_student = pi_draft_student(student, self.eager_model, self.horizon, self.action_dim)

    def draft_sample(
        self,
        model_obs: PiObservation,
        guidance: tuple[np.ndarray, int, float],
        to_policy_actions: Any,
        tolerance: float,
        noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        timer: Any = None,
        verify_noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """`--strategy draft` (`hotloop.realtime.draft`): the executing chunk's rows (robot space, mapped
        by `to_policy_actions` like `rtc_sample`), padded to the horizon, or with a student
        (`use_draft_student`) the student's chunk for this observation handed over from the executing one
        (rows [0, d) the executing chunk's, then `rtc-soft`'s soft mask between the two), are checked by the
        velocity network at `VERIFY_TIMES` from `verify_noise` (default: a fixed draw, the same every
        call); with enough rows accepted they are the answer, else the loop runs as `rtc-soft`'s with the
        accepted rows held. Vision and prefix run once, for the student too. Returns (chunk (1,
        chunk_size, max_action_dim), model space; `DraftOutcome`, whose `kept` rows of the chunk are the
        answer)."""
        from hotloop.realtime.draft import (
            SHIFTED,
            STUDENT,
            DraftOutcome,
            accepted_prefix,
            draft_rows,
            min_rows,
            verify,
        )
        from hotloop.realtime.rtc import prefix_weights

        prev, delay, beta = guidance
        horizon = self.horizon
        n = max(1, min(len(prev), horizon))
        d = max(0, min(int(delay), n, horizon))
        model = self.eager_model
        student = self.draft_student
        options = self._sample_options(noise, generator, timer)
        timer, steps, noise, cache = begin_sampling(model, model_obs, options)
        draft, _ = self._model_space_guidance(draft_rows(prev, horizon), d, to_policy_actions)
        draft = draft.to(self.device)
        held = draft_evals = 0
        if student is not None:
            with torch.no_grad(), timer.stage("draft"):
                proposal = student.propose(cache, model_obs.state, noise)
            # The student's chunk is for this observation (row i: the period i periods from now), but its
            # rows before d are not its to give: the robot executes the executing chunk's rows [0, d) while
            # this call runs (the answer is spliced in at the first period after it is ready, and a call
            # shorter than d periods starts it among rows the executing chunk planned). So the draft is the
            # executing rows [0, d), held (accepted whatever the check says of them, as `rtc-soft` holds
            # them), then the student's chunk handed over from the executing one by `rtc-soft`'s soft mask
            # W (`prefix_weights`): row i is W_i prev_i + (1 - W_i) student_i over the overlap, the
            # student's alone after it (in the model's action columns, zero padded as the shifted draft and
            # the training data are). Handed over, not cut: a fresh one-step chunk every max(d, 2) periods
            # switches plans (demo:conveyor, 200 seeds, 100 / 200 ms: 119 / 160 cut against 193 / 186
            # handed over; docs/realtime.md), as the teacher's own fresh chunks do under async at that
            # rate. What the check decides is how many of the draft's rows follow the held ones.
            held, draft_evals = d, student.steps
            a = self.action_dim
            w = torch.from_numpy(prefix_weights(d, n, horizon)).to(draft)[None, :, None]
            handed_over = w * draft[:, :horizon, :a] + (1.0 - w) * proposal[:, :horizon, :a]
            draft[:, d:horizon, :a] = handed_over[:, d:horizon]
        if verify_noise is None:
            verify_noise = self._fixed_noise()
        with torch.no_grad(), timer.stage("verify"):
            check = verify(
                lambda x, t: model.denoise_step(cache, x, t, model_obs.state),
                draft,
                verify_noise,
                horizon,
                self.action_dim,
                tolerance,
            )
        accepted = accepted_prefix(check.errors, tolerance, held)
        speculative = accepted >= min_rows(horizon, d)
        evals = check.evals + (0 if speculative else steps)
        outcome = DraftOutcome(
            offered=min(len(prev), horizon),
            horizon=horizon,
            accepted=accepted,
            speculative=speculative,
            evals=evals,
            work=self.draft_cost(steps).fraction(check.evals, loop=not speculative, drafts=draft_evals),
            kept=accepted if speculative else horizon,
            source=SHIFTED if student is None else STUDENT,
            held=held,
            draft_evals=draft_evals,
        )
        if speculative:
            return draft, outcome
        if student is not None:
            return self._student_full_path(
                model_obs, draft, prev[:n], d, accepted, to_policy_actions, noise, timer
            ), outcome
        # The full path: rtc-soft's sampler over the executing chunk, its hard part grown to the accepted rows,
        # from the same noise and on the prefix the check already encoded into this policy's cache.
        hold = max(d, min(accepted, n))
        chunk = self.rtc_sample(
            model_obs,
            (prev[:n], hold, beta),
            "soft-prefix",
            to_policy_actions,
            noise=noise,
            timer=timer,
            encoded=True,
        )
        return chunk, outcome

    def _student_full_path(
        self,
        model_obs: PiObservation,
        draft: torch.Tensor,
        prev: np.ndarray,
        delay: int,
        accepted: int,
        to_policy_actions: Any,
        noise: torch.Tensor,
        timer: Any,
    ) -> torch.Tensor:
        """A student's draft with too few rows accepted: `rtc-soft`'s sampler (`soft_prefix_sample_actions`)
        on the prefix already in this policy's cache, from the call's noise, its hard part the draft's
        accepted rows (the executing chunk's [0, d), then the student's up to `accepted`) and its soft tail
        the executing chunk's next rows, as `rtc-soft`'s. With no student row accepted (accepted = d) this
        is exactly `rtc_sample(model_obs, (prev, d, beta), "soft-prefix", ...)`."""
        from hotloop.families.pi.rtc_prefix import soft_prefix_sample_actions
        from hotloop.realtime.rtc import prefix_weights

        horizon, chunk = self.horizon, self.config.chunk_size
        hold = max(delay, min(accepted, horizon))
        target, _ = self._model_space_guidance(prev, delay, to_policy_actions)
        target = target.to(self.device)
        target[:, delay:hold] = draft[:, delay:hold]
        mask = np.zeros(chunk, dtype=np.float32)  # built as `model_space_guidance` builds rtc-soft's
        mask[:horizon] = prefix_weights(hold, max(len(prev), hold), horizon)
        options = self._sample_options(noise, None, timer, encoded=True)
        return soft_prefix_sample_actions(
            self.eager_model, model_obs, target, torch.from_numpy(mask).to(self.device), **options
        )

    def _sample_options(
        self, noise: torch.Tensor | None, generator: torch.Generator | None, timer: Any, encoded: bool = False
    ) -> SampleOptions:
        """The samplers' keywords (`SampleOptions`) for one call: its noise, generator and timer, with this
        policy's step count and preallocated cache (`encoded`: already holding the call's prefix)."""
        return {
            "noise": noise,
            "num_steps": self.num_steps,
            "generator": generator,
            "timer": timer,
            "cache": self._cache,
            "encoded": encoded,
        }

    def _fixed_noise(self) -> torch.Tensor:
        """The draft check's start: one fixed draw (seed 0), the same for every call and every policy seed."""
        noise = self._verify_noise
        if noise is None:
            cfg = self.config
            gen = torch.Generator(device=self.device).manual_seed(0)
            noise = torch.randn(1, cfg.chunk_size, cfg.max_action_dim, generator=gen, device=self.device)
            self._verify_noise = noise
        return noise

    def _model_space_guidance(
        self, prev: np.ndarray, delay: int, to_policy_actions: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The previous actions (robot space) as the model-space target chunk and its soft-mask weights,
        for both RTC modes (`hotloop.realtime.rtc.model_space_guidance`)."""
        from hotloop.realtime.rtc import model_space_guidance

        if prev.shape[1] != self.action_dim:
            raise ConfigError(
                f"rtc_prev_actions has {prev.shape[1]} action columns; this policy has {self.action_dim}"
            )
        return model_space_guidance(
            prev,
            delay,
            self.horizon,
            self.config.chunk_size,
            self.config.max_action_dim,
            lambda a: self.norm_stats.normalize(
                np.asarray(to_policy_actions(a), dtype=np.float32), "actions"
            ),
        )

    def rtc_sample(
        self,
        model_obs: PiObservation,
        guidance: tuple[np.ndarray, int, float],
        mode: str,
        to_policy_actions: Any,
        noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        timer: Any = None,
        encoded: bool = False,
    ) -> torch.Tensor:
        """A chunk sampled onto the previous one, `guidance` = (previous actions (n, D) in the robot's space,
        d, beta); `to_policy_actions` maps them into the space this policy's norm stats describe (the identity
        unless an adapter predicts relative actions). `mode` (`hotloop.realtime.rtc.guidance_mode`):
        - "guided": RTC guidance (`hotloop.families.pi.rtc.guided_sample_actions`);
        - "prefix": RTC by action conditioning (`hotloop.families.pi.rtc_prefix`): the first d previous
          actions are given as the clean prefix of the new chunk (d capped at the rows given and the
          horizon; beta is not used);
        - "soft-prefix": the same over the whole soft mask, its tail started part-way along the flow from
          the previous actions and the result held to them by the mask (`soft_prefix_sample_actions`,
          `--strategy rtc-soft`).
        `encoded`: this policy's cache already holds `model_obs`'s prefix (`draft_sample`'s check filled it)."""
        from hotloop.families.pi.rtc import guided_sample_actions
        from hotloop.families.pi.rtc_prefix import prefix_sample_actions, soft_prefix_sample_actions

        prev, delay, beta = guidance
        if mode != "guided":
            delay = max(0, min(int(delay), len(prev), self.horizon))
        target, weights = self._model_space_guidance(prev, delay, to_policy_actions)
        target = target.to(self.device)
        options = self._sample_options(noise, generator, timer, encoded)
        if mode == "guided":
            return guided_sample_actions(
                self.eager_model, model_obs, target, weights.to(self.device), beta, **options
            )
        if mode == "soft-prefix":  # one time per token: the mask is the same on every action column
            mask = weights[:, 0].to(self.device)
            return soft_prefix_sample_actions(self.eager_model, model_obs, target, mask, **options)
        return prefix_sample_actions(self.eager_model, model_obs, target, delay, **options)


def pi_policy_spec(
    config: PiConfig,
    norm_stats: NormStats,
    action_dim: int,
    horizon: int,
    default_prompt_tokens: list[int],
    prompt: bool,
) -> Any:
    """`PiPolicy.spec` from its settings alone (a compiled artifact stores it without building one)."""
    from hotloop.policy_spec import ImageSpec, PolicySpec

    size = config.image_side
    stats = norm_stats.state
    known = stats.mean if stats is not None and stats.mean is not None else None
    state_dim = len(known) if known is not None else config.max_state_dim
    if config.pi05:
        state_dim = max(0, min(state_dim, config.max_token_len - len(default_prompt_tokens)))
    return PolicySpec(
        images=tuple(ImageSpec("*", size, size) for _ in range(config.views)),
        min_views=1,
        images_as="array",
        state_dim=state_dim,
        action_dim=action_dim,
        action_meaning="any",
        horizon=horizon,
        prompt=prompt,
    )
