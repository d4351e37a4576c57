"""How pi reads recorded frames (dataset frame -> `PiObservation`, action chunk -> flow-matching targets)
and how its observations batch: the pi half of `hotloop.families.frames`.

- a random-weight pi target (pi05:tiny, pi05:small...) takes the dataset's cameras resized to its view
  size, its state normalised by the dataset's own mean/std and zero-padded, one prompt id per task;
- a demo policy (`demo:conveyor`...) uses its own adapter (relative state and actions, its shipped norm stats).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hotloop.errors import ConfigError
from hotloop.families.frames import DataLimits, TargetAdapter
from hotloop.families.pi.sampling import PiObservation
from hotloop.models.configs import PiConfig


def pi_limits(cfg: PiConfig) -> DataLimits:
    """What a pi model can take at most: its state / action / view sizes, and for pi0.5 the prompt slots
    the discretised state fills beside a task id."""

    def prompt_fits(state_dim: int, where: str, name: str) -> None:
        if cfg.pi05 and state_dim + 1 > cfg.max_token_len:
            raise ConfigError(
                f"{where}: {state_dim} state bins + a task id exceed {name}'s {cfg.max_token_len} "
                "prompt slots (data recorded for another model)"
            )

    return DataLimits(cfg.max_state_dim, cfg.max_action_dim, cfg.views, cfg.chunk_size, prompt_fits)


def pi_target_adapter(target: str, model: Any, dataset: Any, norm_stats: Any = None) -> TargetAdapter:
    """A pi target reading `dataset`, one task id per prompt: normalised by `norm_stats` (a checkpoint's
    own), or for a random-weight target by the dataset's mean/std."""
    from hotloop.families.pi.family import PiFamily
    from hotloop.families.pi.policy import NormStats, PiPolicy, Stats

    cfg = model.cfg
    stats = dataset.stats
    state_stats = stats.get("observation.state", {})
    action_stats = stats.get("action", {})
    norm = norm_stats or NormStats(
        state=Stats(mean=_arr(state_stats, "mean"), std=_arr(state_stats, "std")),
        actions=Stats(mean=_arr(action_stats, "mean"), std=_arr(action_stats, "std")),
        mode="mean_std" if state_stats and action_stats else "identity",
    )
    policy = PiPolicy(model, cfg, norm_stats=norm)
    keys = tuple(dataset.image_keys)

    def observe(images: dict[str, np.ndarray], state: np.ndarray, task_index: int) -> PiObservation:
        return policy.observation(
            {
                "images": np.stack([images[k] for k in keys]),
                "state": state,
                "prompt_tokens": [1 + task_index % 200],
            }
        )

    def targets(chunk: np.ndarray, state: np.ndarray) -> np.ndarray:
        return padded_chunk(norm.normalize(chunk, "actions"), cfg)

    names = dataset.features["action"].get("names") or []
    grip = next((i for i, n in enumerate(names) if isinstance(n, str) and "grip" in n), None)
    return TargetAdapter(target, observe, targets, None, None, None, grip, pi_limits(cfg), PiFamily())


def _arr(stats: dict[str, Any], key: str) -> np.ndarray | None:
    value = stats.get(key)
    return None if value is None else np.asarray(value, dtype=np.float32)


def padded_chunk(chunk: np.ndarray, cfg: PiConfig) -> np.ndarray:
    out = np.zeros((cfg.chunk_size, cfg.max_action_dim), dtype=np.float32)
    h = min(cfg.chunk_size, chunk.shape[0])
    out[:h, : chunk.shape[1]] = chunk[:h]
    if h < cfg.chunk_size:  # a shorter horizon repeats its last action, as the demo's training does
        out[h:, : chunk.shape[1]] = chunk[h - 1]
    return out


def _data(target: str, dataset: Any, options: Any, model: Any = None) -> tuple[Any, TargetAdapter]:
    """(fp32 model, adapter) of a seeded random-weight pi target reading `dataset` (`model`: one already
    built for it)."""
    from hotloop.families.pi.targets import build_model, resolve_config

    if model is None:
        cfg = resolve_config(target, options)
        model = build_model(cfg, torch.float32, "cpu", options.seed)
    return model, pi_target_adapter(target, model, dataset)


def build_pi0_data(
    config_name: str, dataset: Any, options: Any, model: Any = None
) -> tuple[Any, TargetAdapter]:
    from hotloop.families.pi.targets import qualify

    return _data(qualify(config_name, "pi0"), dataset, options, model)


def build_pi05_data(
    config_name: str, dataset: Any, options: Any, model: Any = None
) -> tuple[Any, TargetAdapter]:
    from hotloop.families.pi.targets import qualify

    return _data(qualify(config_name, "pi05"), dataset, options, model)
