"""Prompt-length buckets: the prefix (and the denoise engines reading its cache) built for a few prompt
lengths, and each observation run by the smallest bucket that holds its real tokens.

Exact by construction: prompt slots past the last real token are padding, masked out of every attention
and not advancing positions, so dropping them changes no valid token's computation. What remains is
floating-point summation order over the shorter key axis (~1e-7 in float32; the tests bound it).
A prompt that grows only moves to the next bucket: no recompilation, no latency cliff beyond that step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor

from hotloop.families.pi.engines import PiEngineShape, PiPipeline, SubEngine, reshape_subengines
from hotloop.errors import ConfigError
from hotloop.measure.stages import StageTimer
from hotloop.models.configs import PiConfig
from hotloop.families.pi.sampling import PiObservation

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


def choose_bucket(buckets: Iterable[int], length: int) -> int:
    """The smallest bucket >= length."""
    fitting = [b for b in buckets if b >= length]
    if not fitting:
        raise ConfigError(f"a prompt of {length} slots fits no bucket of {sorted(buckets)}")
    return min(fitting)


def bucketed_subengines(
    cfg: PiConfig, engines: Mapping[str, SubEngine], buckets: Iterable[int]
) -> dict[int, dict[str, SubEngine]]:
    """Per bucket, the engines (same modules, shared weights) with example inputs of that prompt length."""
    return {b: reshape_subengines(cfg, engines, b) for b in buckets}


class BucketedPiPipeline:
    """Routes each observation to the pipeline of the smallest bucket that holds its prompt."""

    def __init__(self, pipelines: Mapping[int, PiPipeline]) -> None:
        if not pipelines:
            raise ConfigError("BucketedPiPipeline needs at least one bucket")
        self.pipelines = dict(sorted(pipelines.items()))
        self.buckets = tuple(self.pipelines)
        self.last_bucket: int | None = None

    @classmethod
    def eager(
        cls,
        cfg: PiConfig,
        engines: Mapping[str, SubEngine],
        buckets: Iterable[int] = DEFAULT_BUCKETS,
        loop: bool = False,
    ) -> BucketedPiPipeline:
        """Eager pipelines over `engines` (any prompt length) for `prompt_buckets(cfg.max_token_len, buckets)`."""
        pipelines = {}
        for b, bucket_engines in bucketed_subengines(
            cfg, engines, prompt_buckets(cfg.max_token_len, buckets)
        ).items():
            x = bucket_engines["denoise_step"].example_inputs[0]
            shape = PiEngineShape(
                batch=int(x.shape[0]),
                views=int(bucket_engines["vision"].example_inputs[0].shape[1]),
                prompt_slots=b,
                num_steps=int(bucket_engines["denoise_step"].constants["time_table"].shape[0]),
            )
            pipelines[b] = PiPipeline.eager(cfg, shape, bucket_engines, loop=loop)
        return cls(pipelines)

    def bucket_for(self, obs: PiObservation) -> int:
        return choose_bucket(self.buckets, prompt_length(obs.lang_masks))

    def sample(self, obs: PiObservation, noise: Tensor, timer: StageTimer | None = None) -> Tensor:
        bucket = self.bucket_for(obs)
        self.last_bucket = bucket
        return self.pipelines[bucket].sample(obs, noise, timer)
