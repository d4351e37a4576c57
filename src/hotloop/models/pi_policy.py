"""`PiPolicy`: a pi0 / pi0.5 model behind the `Policy` protocol (raw observation in, robot actions out).

Preprocessing mirrors LeRobot's: images resized with padding to the model size and mapped to [-1, 1],
state normalised (mean/std or quantiles) and zero-padded, pi0.5's state discretized into the prompt;
actions cropped to the robot's dimension and unnormalised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from hotloop.errors import ConfigError
from hotloop.models.configs import PiConfig
from hotloop.models.pi0 import PiModel, PrefixCache, state_prompt_tokens
from hotloop.sampling import PiObservation, sample_actions


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

    def __init__(
        self,
        model: PiModel,
        config: PiConfig,
        tokenizer: Tokenizer | None = None,
        norm_stats: NormStats | None = None,
        action_dim: int | None = None,
        horizon: int | None = None,
        default_prompt_tokens: list[int] | None = None,
        num_steps: int | None = None,
        seed: int = 0,
    ) -> None:
        self.model = model.eval()
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
        self.device = model.action_in_proj.weight.device
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self._cache = model.allocate_cache(batch=1)

    @property
    def generator(self) -> torch.Generator:
        """The noise stream `infer` draws from (restarted by `reset`)."""
        return self._generator

    @property
    def cache(self) -> PrefixCache:
        """The preallocated prefix cache `infer` fills (batch 1)."""
        return self._cache

    def reset(self) -> None:
        self._generator.manual_seed(self.seed)

    @property
    def spec(self) -> Any:
        """What it consumes (see hotloop.policy_spec): up to `views` square views of any name (absent
        ones are masked, so one is enough), the state padded to the normalised or model size, no text
        prompt without a tokenizer; the actions' meaning is unknown here ("any")."""
        from hotloop.policy_spec import ImageSpec, PolicySpec

        size = self.config.vision.image_size
        stats = self.norm_stats.state
        known = stats.mean if stats is not None and stats.mean is not None else None
        return PolicySpec(
            images=tuple(ImageSpec("*", size, size) for _ in range(self.config.views)),
            min_views=1,
            images_as="array",
            state_dim=len(known) if known is not None else self.config.max_state_dim,
            action_dim=self.action_dim,
            action_meaning="any",
            horizon=self.horizon,
            prompt=self.tokenizer is not None,
        )

    def _images(self, images: Any) -> tuple[torch.Tensor, torch.Tensor]:
        arr = np.asarray(images)
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4 or arr.shape[-1] != 3:
            raise ConfigError(f"obs['images'] must be (views, H, W, 3); got shape {arr.shape}")
        x = torch.from_numpy(
            arr.astype(np.float32) / 255.0 if arr.dtype == np.uint8 else arr.astype(np.float32)
        )
        x = resize_with_pad(x.permute(0, 3, 1, 2), self.config.vision.image_size) * 2.0 - 1.0
        v = x.shape[0]
        if v > self.config.views:
            raise ConfigError(f"obs has {v} camera views; the model takes at most {self.config.views}")
        # Absent views are filled with -1 (black) and masked out, as LeRobot does.
        full = torch.full((self.config.views, *x.shape[1:]), -1.0)
        full[:v] = x
        mask = torch.arange(self.config.views) < v
        return full[None].to(self.device), mask[None].to(self.device)

    def _prompt_ids(self, obs: dict[str, Any]) -> list[int]:
        if "prompt_tokens" in obs:
            return [int(i) for i in np.asarray(obs["prompt_tokens"]).reshape(-1)]
        if "prompt" in obs:
            if self.tokenizer is None:
                raise ConfigError(
                    "obs has a text 'prompt' but this policy has no tokenizer; pass 'prompt_tokens'"
                )
            return list(self.tokenizer.encode(str(obs["prompt"])))
        return self.default_prompt_tokens

    def observation(self, obs: dict[str, Any]) -> PiObservation:
        """Raw observation -> model-space inputs (batch 1)."""
        cfg = self.config
        images, image_masks = self._images(obs["images"])
        state = self.norm_stats.normalize(
            np.asarray(obs.get("state", np.zeros(0)), dtype=np.float32), "state"
        )
        if state.shape[-1] > cfg.max_state_dim:
            raise ConfigError(
                f"state has {state.shape[-1]} entries; the model takes at most {cfg.max_state_dim}"
            )
        ids = self._prompt_ids(obs)
        if cfg.pi05:
            tokens, mask = state_prompt_tokens(ids, np.clip(state, -1.0, 1.0), cfg)
        else:
            tokens = np.zeros(cfg.max_token_len, dtype=np.int64)
            mask = np.zeros(cfg.max_token_len, dtype=bool)
            n = min(len(ids), cfg.max_token_len)
            tokens[:n], mask[:n] = ids[:n], True
        padded = np.zeros(cfg.max_state_dim, dtype=np.float32)
        padded[: state.shape[-1]] = state
        return PiObservation(
            images=images,
            image_masks=image_masks,
            lang_tokens=torch.from_numpy(tokens)[None].to(self.device),
            lang_masks=torch.from_numpy(mask)[None].to(self.device),
            state=torch.from_numpy(padded)[None].to(self.device),
        )

    def infer(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        model_obs = self.observation(obs)
        chunk = sample_actions(
            self.model, model_obs, num_steps=self.num_steps, generator=self._generator, cache=self._cache
        )
        actions = chunk[0, : self.horizon, : self.action_dim].cpu().numpy()
        return {"actions": self.norm_stats.unnormalize(actions, "actions").astype(np.float32)}
