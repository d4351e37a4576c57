"""Prompt-length buckets: the prefix (and the stages reading its cache) built for a few prompt lengths,
and each observation run by the smallest bucket that holds its real tokens.

Exact by construction: prompt slots past the last real token are padding, masked out of every attention
and not advancing positions, so dropping them changes no valid token's computation. What remains is
floating-point summation order over the shorter key axis (~1e-7 in float32; the tests bound it).
A prompt that grows only moves to the next bucket: no recompilation, no latency cliff beyond that step.
A family offers buckets through `Capabilities.prompt_buckets` and its `prompt_length` / `reshape_subengines`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from hotloop.errors import ConfigError

DEFAULT_BUCKETS = (32, 64, 128)


def prompt_buckets(max_token_len: int, sizes: Iterable[int] = DEFAULT_BUCKETS) -> tuple[int, ...]:
    """Sorted bucket sizes below `max_token_len`, then `max_token_len` itself (every prompt fits one)."""
    sizes = tuple(sizes)
    bad = [s for s in sizes if not isinstance(s, int) or s < 1]
    if bad:
        raise ConfigError(f"--buckets sizes must be positive integers (got {bad}); e.g. --buckets 32,64,128")
    return (*sorted({s for s in sizes if s < max_token_len}), max_token_len)


def parse_buckets(text: str) -> tuple[int, ...]:
    """ "32,64,128" -> (32, 64, 128); a clear error naming --buckets otherwise."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"cannot read --buckets {text!r}; write sizes like 32,64,128") from None
    if not sizes or any(s < 1 for s in sizes):
        raise ConfigError(f"--buckets {text!r} needs positive sizes, e.g. 32,64,128")
    return sizes


def prompt_length(lang_masks: Tensor) -> int:
    """Slots up to and including the last real token, over the batch (0 for an empty prompt)."""
    valid = lang_masks.bool().any(dim=0)
    idx = torch.nonzero(valid)
    return int(idx[-1, 0]) + 1 if idx.numel() else 0


def check_views_and_prompt(obs: Any, shape: Any) -> None:
    """Refuse an observation (images (B, V, ...), lang_masks (B, L)) whose batch or views are not the engine
    shape's, or whose prompt has real tokens beyond its `prompt_slots` (padding beyond them may go)."""
    b, v = obs.images.shape[:2]
    if (b, v) != (shape.batch, shape.views):
        raise ConfigError(
            f"observation has batch {b} and {v} views; this engine takes {shape.batch} and {shape.views}"
        )
    slots, masks = shape.prompt_slots, obs.lang_masks
    if masks.shape[1] > slots and bool(masks[:, slots:].any()):
        raise ConfigError(
            f"the prompt has real tokens beyond the engine's {slots} prompt slots; "
            "build the prefix for a larger prompt bucket"
        )


def choose_bucket(buckets: Iterable[int], length: int) -> int:
    """The smallest bucket >= length."""
    fitting = [b for b in buckets if b >= length]
    if not fitting:
        raise ConfigError(f"a prompt of {length} slots fits no bucket of {sorted(buckets)}")
    return min(fitting)


class BucketedPipeline:
    """Routes each observation to the pipeline of the smallest bucket that holds its prompt."""

    def __init__(self, pipelines: Mapping[int, Any], prompt_length: Callable[[Any], int]) -> None:
        if not pipelines:
            raise ConfigError("a bucketed pipeline needs at least one bucket")
        self.pipelines = dict(sorted(pipelines.items()))
        self.buckets = tuple(self.pipelines)
        self.prompt_length = prompt_length
        self.last_bucket: int | None = None

    @property
    def runners(self) -> dict[str, Any]:
        return dict(self.pipelines[self.buckets[-1]].runners)

    @property
    def signatures(self) -> dict[str, Any]:
        return dict(self.pipelines[self.buckets[-1]].signatures)

    def bucket_for(self, obs: Any) -> int:
        return choose_bucket(self.buckets, self.prompt_length(obs))

    def sample(self, obs: Any, noise: Tensor, timer: Any = None) -> Tensor:
        bucket = self.bucket_for(obs)
        self.last_bucket = bucket
        return self.pipelines[bucket].sample(obs, noise, timer)  # type: ignore[no-any-return]
