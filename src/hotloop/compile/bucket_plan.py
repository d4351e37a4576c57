"""Prompt-length buckets of a chosen plan: the prefix and denoise sub-engines prepared once more per bucket
with the plan's own backend, precision and recipe, each checked against the fp32 reference before use.

The plan is chosen at the full prompt length (the worst case); a bucket only shortens the key axis, so the
same backend wins there and re-planning per bucket would multiply the planner's cost for nothing. Every
bucket still passes the same honest check: its final actions, for an observation whose real tokens fill
the bucket, against the unbucketed fp32 reference, within the plan's tolerance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from hotloop.compile.backends import get_backend
from hotloop.compile.backends.base import Runner
from hotloop.compile.chain import loop_stage, pipeline
from hotloop.compile.planner import Candidate, PlanConfig, prepare, time_calls
from hotloop.compile.validate import compare_actions
from hotloop.families.buckets import prompt_buckets
from hotloop.families.protocol import PolicySource


def bucket_name(sub_engine: str, bucket: int) -> str:
    """Manifest name of a bucket's sub-engine: prefix@32, denoise_step@32."""
    return f"{sub_engine}@{bucket}"


def split_name(name: str) -> tuple[str, int | None]:
    """'prefix@32' -> ('prefix', 32); 'prefix' -> ('prefix', None) (the full prompt)."""
    if "@" not in name:
        return name, None
    base, _, size = name.partition("@")
    return base, int(size)


def bucket_sizes(config: PlanConfig, prompt_slots: int) -> tuple[int, ...]:
    """The extra buckets below the full prompt (the full one is the plan itself)."""
    if not config.buckets:
        return ()
    return prompt_buckets(prompt_slots, config.buckets)[:-1]


@dataclass
class BucketRunners:
    bucket: int
    runners: dict[str, Runner]  # sub-engine name (prefix, denoise_step|denoise_loop) -> runner
    pipeline: Any
    action_cos: float
    action_max_abs_normalized: float
    latency_p50_ms: float
    latency_p99_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "action_cos": self.action_cos,
            "action_max_abs_normalized": self.action_max_abs_normalized,
            "latency_ms": {"p50": self.latency_p50_ms, "p99": self.latency_p99_ms},
        }


def plan_buckets(
    source: PolicySource,
    sets: Any,  # compile.plan.EngineSets
    chosen: dict[str, Candidate],
    ref_pipeline: Any,
    config: PlanConfig,
    log: Callable[[str], None] = lambda s: None,
) -> list[BucketRunners]:
    """Per extra bucket: the chosen prefix and denoise candidates prepared at that prompt length, with
    the bucket's actions checked against the fp32 reference and its end-to-end latency measured."""
    out: list[BucketRunners] = []
    family, cfg = source.family, source.cfg
    bucketed = family.capabilities.bucket_stages
    looped = loop_stage(family)
    for bucket in bucket_sizes(config, source.shape.prompt_slots):
        # The stages before the prompt (pi's vision) run their chosen runner for every bucket.
        runners: dict[str, Runner] = {
            chosen[s.name].sub_engine: _runner(chosen[s.name])
            for s in family.stages
            if s.name not in bucketed
        }
        loop_set = None
        calibration_cache: dict[int, Any] = {}  # per engine set, at this bucket's shapes
        reshaped_sets: dict[int, dict[str, Any]] = {}
        for stage in bucketed:
            cand = chosen[stage]
            own = sets.get(get_backend(cand.backend).graph_dtype(cand.precision), cand.variant)
            if id(own) not in reshaped_sets:
                reshaped_sets[id(own)] = family.reshape_subengines(cfg, own, bucket)
            reshaped = reshaped_sets[id(own)]
            extra = _quantized_options(cand, reshaped, source, config, bucket, calibration_cache)
            runners[cand.sub_engine] = prepare(cand, reshaped[cand.sub_engine], config.threads, extra)
            if stage == looped:
                loop_set = own
        shape = family.with_prompt_slots(source.shape, bucket)
        pipe = pipeline(
            dataclasses.replace(source, shape=shape),
            family.reshape_subengines(cfg, sets.get(torch.float32), bucket),
            runners,
            loop_set,
            sets.shipped_lookups(chosen),  # a lean plan's lookup tables as its artifact stores them
        )
        obs = family.fill_prompt(source.obs, bucket)
        ref = ref_pipeline.sample(obs, source.noise).clone()
        agreement = compare_actions(ref, pipe.sample(obs, source.noise))
        violation = config.tolerance.violation(agreement)
        if violation:  # this bucket is left out (the full prompt still serves it); finished work is kept
            log(f"bucket {bucket} left out: its engines are outside tolerance ({violation})")
            continue
        lat = time_calls(_sampler(pipe, obs, source.noise), config.warmup, config.iterations)
        log(f"bucket {bucket}: action cos {agreement.cosine:.6f}, p50 {lat.p50:.2f} ms")
        out.append(
            BucketRunners(
                bucket,
                {n: r for n, r in runners.items() if family.stage_of(n).name in bucketed},
                pipe,
                agreement.cosine,
                agreement.max_abs_normalized,
                lat.p50,
                lat.p99,
            )
        )
    return out


def _sampler(pipe: Any, obs: Any, noise: torch.Tensor) -> Callable[[], Any]:
    return lambda: pipe.sample(obs, noise)


def _quantized_options(
    cand: Candidate,
    engines: dict[str, Any],
    source: PolicySource,
    config: PlanConfig,
    bucket: int,
    cache: dict[int, Any],
) -> dict[str, Any]:
    """A quantized candidate's options at this bucket: its fp32 layers, and for static int8 the
    calibration inputs captured again at the bucket's shapes (the calibration frames with their prompts
    cut to the bucket), since the full prompt's activations do not fit a shorter key axis."""
    if cand.precision in ("fp32", "bf16"):
        return {}
    from hotloop.compile.calibration_inputs import plan_options

    calibration = config.calibration
    if calibration is not None:
        calibration = dataclasses.replace(calibration, obs=source.family.fill_prompt(calibration.obs, bucket))
    return plan_options(
        cand.precision,
        cand.sub_engine,
        cand.variant,
        engines,
        dataclasses.replace(source, shape=source.family.with_prompt_slots(source.shape, bucket)),
        dataclasses.replace(config, calibration=calibration),
        cache,
    )


def _runner(cand: Candidate) -> Runner:
    assert cand.runner is not None, f"{cand.label} was chosen without a runner"
    return cand.runner
