"""pi's prompt-length buckets: its sub-engines reshaped per bucket and the eager bucketed pipeline
(`hotloop.families.buckets` routes; see there why buckets are exact)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hotloop.families.buckets import DEFAULT_BUCKETS, BucketedPipeline, prompt_buckets, prompt_length
from hotloop.families.pi.engines import PiEngineShape, PiPipeline, SubEngine, reshape_subengines
from hotloop.models.configs import PiConfig


def bucketed_subengines(
    cfg: PiConfig, engines: Mapping[str, SubEngine], buckets: Iterable[int]
) -> dict[int, dict[str, SubEngine]]:
    """Per bucket, the engines (same modules, shared weights) with example inputs of that prompt length."""
    return {b: reshape_subengines(cfg, engines, b) for b in buckets}


class BucketedPiPipeline(BucketedPipeline):
    """`BucketedPipeline` over pi pipelines, routed by the prompt's real tokens."""

    def __init__(self, pipelines: Mapping[int, PiPipeline]) -> None:
        super().__init__(pipelines, lambda obs: prompt_length(obs.lang_masks))

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
