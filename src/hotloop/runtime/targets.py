"""Artifacts as bench / eval targets: `hotloop bench ART`, `hotloop eval ART` (a folder with manifest.json)."""

from __future__ import annotations

from typing import Any

from hotloop.targets import BenchCase, TargetOptions

# Without `bench --cold-load` the load found the page cache as it was (warm when the files were just read).
NOT_DROPPED = "as found: page cache not dropped (bench --cold-load drops it)"


def _engine(path: str, options: TargetOptions, supported: frozenset[str] = frozenset()) -> Any:
    from hotloop.runtime.engine import Engine

    # Shapes were fixed at compile time: an option that would change them is refused, not ignored.
    # --prompt-tokens only chooses how many prompt slots the observation fills (the engine picks its bucket).
    options.reject_unsupported(path, set(supported) | {"memory_cap_mb"})
    return Engine.load(path, threads=options.threads, memory_cap_mb=options.memory_cap_mb)


def build_bench(path: str, options: TargetOptions) -> BenchCase:
    import torch

    from hotloop.errors import ConfigError

    engine = _engine(path, options, frozenset({"prompt_tokens"}))
    if engine.kind == "onnx":
        if options.prompt_tokens is not None:
            raise ConfigError(f"--prompt-tokens is for VLA artifacts; {path} is an ONNX plan")
        obs = engine.example_observation()
        info = {**engine.describe(), "load_cache": NOT_DROPPED}
        return BenchCase(name=path, run=lambda timer: engine.infer(obs), info=info)
    family, cfg = engine.family, engine.cfg
    buckets = family.capabilities.prompt_buckets
    if options.prompt_tokens is not None and not buckets:
        raise ConfigError(f"--prompt-tokens is for VLA artifacts; {path} is a {family.name} policy")
    slots = getattr(engine.shape, "prompt_slots", 0)  # the artifact's full prompt (its largest bucket)
    if options.prompt_tokens is not None and options.prompt_tokens > slots:
        raise ConfigError(
            f"--prompt-tokens {options.prompt_tokens} exceeds {path}'s {slots} prompt slots; "
            f"use at most {slots}"
        )
    obs = engine.example_observation(options.prompt_tokens)
    noise = family.make_noise(
        cfg, engine.shape, engine.shape.batch, torch.Generator().manual_seed(options.seed)
    )
    info = {**engine.describe(), "num_steps": engine.shape.num_steps, "load_cache": NOT_DROPPED}
    if hasattr(engine.shape, "views"):
        info["views"] = engine.shape.views
    if options.prompt_tokens is not None:
        info["prompt_tokens"] = options.prompt_tokens
    shape = engine.shape
    if len(engine.pipelines) > 1:
        info["prompt_bucket"] = engine.pipeline.bucket_for(obs)
        shape = family.with_prompt_slots(shape, info["prompt_bucket"])
    full = getattr(engine.shape, "prompt_slots", 0)
    work = stage_work(engine, info.get("prompt_bucket", full), shape)
    if work:
        info["work"] = work
    return BenchCase(name=path, run=lambda timer: engine.sample(obs, noise, timer=timer), info=info)


def stage_work(engine: Any, bucket: int, shape: Any) -> dict[str, Any]:
    """Analytic work per stage at each stage's own precision (the roofline of `hotloop bench ART`): for
    a family with prompt buckets the prefix over the bucket it runs; a loop stage without the time
    conditioning its tables replaced."""
    # int8-dynamic quantizes activations on the fly: its matmuls are int8. Weight-only int8/int4 compute in
    # floating point after decompressing the weights, so they are judged against the fp32 peak.
    names = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8", "int8-dynamic": "int8"}
    precisions = {}
    for stage in engine.family.stages:
        runner = next(r for n, r in engine.pipelines[bucket].runners.items() if n in stage.sub_engines)
        precisions[stage.name] = names.get(runner.precision, "float32")
    return engine.family.stage_work(engine.cfg, shape, precisions)  # type: ignore[no-any-return]


def build_policy(path: str, options: TargetOptions) -> Any:
    from hotloop.runtime.policy import engine_policy

    return engine_policy(_engine(path, options), seed=options.seed)
