"""The frames a LeRobot-layout demo policy (ACT, SmolVLA) trains on, and the dataset statistics a LeRobot
demo's processors (ACT, SmolVLA, Diffusion Policy) normalise with, as LeRobot computes them (commit 7427f318).

- `training_frames`: every frame of the successful episodes with its views, state and the chunk of
  actions that follows it, padded past the episode's end with its last action and masked
  (`action_is_pad`), as LeRobot's `delta_timestamps` pad them.
- the statistics (`episode_stats`, `aggregate`, `dataset_stats`; Diffusion Policy's too): LeRobot's
  `compute_episode_stats` per episode (vectors per dimension; images per channel over `sample_indices`
  frames, in [0, 1], counted by frames) aggregated with the parallel variance formula.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

IMAGES_PREFIX = "observation.images."


def feature_stats(batch: np.ndarray) -> dict[str, np.ndarray]:
    """One episode's statistics of a feature, rows being samples (RunningQuantileStats after one update):
    min, max, mean, std from the mean of squares (float32 math), and the row count."""
    x = batch.astype(np.result_type(batch.dtype, np.float32), copy=False)
    mean = np.mean(x, axis=0)
    std = np.sqrt(np.maximum(0, np.mean(x**2, axis=0) - mean**2))
    return {
        "min": np.min(x, axis=0),
        "max": np.max(x, axis=0),
        "mean": mean,
        "std": std,
        "count": np.array([len(x)]),
    }


def sample_indices(n: int) -> list[int]:
    """LeRobot's compute_stats.sample_indices (estimate_num_samples with its defaults)."""
    samples = max(min(100, n), min(int(n**0.75), 10_000))
    return [int(i) for i in np.round(np.linspace(0, n - 1, samples)).astype(int)]


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """One episode's per-channel statistics of (T, H, W, 3) uint8 frames: over the `sample_indices`
    frames and their pixels (the (0, 2, 3) reduction of channels-first images), in [0, 1], shaped
    (3, 1, 1); the count is the frames sampled, as LeRobot counts them."""
    sampled = frames[sample_indices(len(frames))]
    stats = feature_stats(sampled.reshape(-1, sampled.shape[-1]))
    stats["count"] = np.array([len(sampled)])
    return {k: v if k == "count" else (v / 255.0).reshape(-1, 1, 1) for k, v in stats.items()}


def episode_stats(ep: Any, views: tuple[str, ...]) -> dict[str, dict[str, np.ndarray]]:
    """compute_episode_stats: the state and action per dimension, each view per channel."""
    out = {"observation.state": feature_stats(ep.state), "action": feature_stats(ep.action)}
    for view in views:
        out[IMAGES_PREFIX + view] = image_stats(ep.images[view])
    return out


def aggregate_feature(per_episode: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """aggregate_feature_stats: count-weighted means, the parallel variance, min of mins, max of maxes."""
    means = np.stack([s["mean"] for s in per_episode])
    variances = np.stack([s["std"] ** 2 for s in per_episode])
    counts = np.stack([s["count"] for s in per_episode])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    return {
        "min": np.min(np.stack([s["min"] for s in per_episode]), axis=0),
        "max": np.max(np.stack([s["max"] for s in per_episode]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": total,
    }


def aggregate(stats: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Every feature's episodes aggregated (`aggregate_feature`)."""
    return {key: aggregate_feature([s[key] for s in stats]) for key in stats[0]}


def dataset_stats(dataset: Any, views: tuple[str, ...]) -> dict[str, dict[str, np.ndarray]]:
    """The statistics of every episode of the dataset (the failed ones too, as LeRobot's dataset holds
    them) for the state, the action and `views`."""
    return aggregate([episode_stats(dataset.episode(i), views) for i in range(len(dataset))])


@dataclass
class ChunkedFrames:
    images: np.ndarray  # (N, V, H, W, 3) uint8
    state: np.ndarray  # (N, S) float32
    actions: np.ndarray  # (N, chunk, A) float32, past the episode end: its last action
    is_pad: np.ndarray  # (N, chunk) bool

    def tensors(self) -> tuple[Any, Any, Any, Any]:
        """(images, state, actions, is_pad) as torch tensors sharing the arrays' memory."""
        import torch

        return tuple(torch.from_numpy(a) for a in (self.images, self.state, self.actions, self.is_pad))  # type: ignore[return-value]


def training_frames(dataset: Any, views: tuple[str, ...], chunk: int) -> tuple[ChunkedFrames, Any, int]:
    """(the frames, the LeRobot statistics of their episodes, how many episodes they come from)."""
    from hotloop.train.data import chunk_indices, successful_episodes

    images, states, actions, pads, stats = [], [], [], [], []
    for ep in successful_episodes(dataset, views):
        idx, is_pad = chunk_indices(len(ep.action), chunk)
        images.append(np.stack([ep.images[v] for v in views], axis=1))
        states.append(np.asarray(ep.state, dtype=np.float32))
        actions.append(np.asarray(ep.action, dtype=np.float32)[idx])
        pads.append(is_pad)
        stats.append(episode_stats(ep, views))
    frames = ChunkedFrames(
        np.concatenate(images), np.concatenate(states), np.concatenate(actions), np.concatenate(pads)
    )
    # The ACT and SmolVLA demos' processors hold no count (their shipped checkpoints were written so).
    held = {key: {k: v for k, v in sub.items() if k != "count"} for key, sub in aggregate(stats).items()}
    return frames, held, len(stats)
