"""Bench and policy targets for pi0 / pi0.5 with seeded random weights (`pi0:full`, `pi05:small`...).

The target table calls `fn(config_name, options)`. Because `pi0:full` and `pi05:full` share the config
name "full", the family-specific entry points (`build_pi0_bench`, `build_pi05_bench`, ...) are the
unambiguous ones; `build_bench` / `build_policy` also accept a qualified name ("pi05:full") and resolve an
unqualified one only where it is unique ("small", "nano").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from hotloop.errors import ConfigError
from hotloop.families.pi.policy import PiPolicy
from hotloop.families.pi.roofline import pi_stage_work
from hotloop.families.pi.sampling import PiObservation, check_inputs, make_noise, sample_actions
from hotloop.measure.stages import StageTimer
from hotloop.models.configs import PiConfig, pi_configs
from hotloop.models.pi0 import PiModel, init_weights
from hotloop.targets import BenchCase, TargetOptions, check_fits_memory

MAX_VIEWS = 3  # the published checkpoints take a base camera and two wrist cameras
_SUPPORTED = {
    "views",
    "num_steps",
    "horizon",
    "action_dim",
    "dtype",
    "batch",
    "device",
    "prompt_tokens",
    "buckets",
}
# float16 is refused: the additive attention masks overflow to -inf and padded rows turn the output NaN.
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def qualify(config_name: str, family: str | None) -> str:
    if ":" in config_name:
        return config_name
    if family is not None:
        return f"{family}:{config_name}"
    matches = [n for n in pi_configs().names() if n.split(":", 1)[1] == config_name]
    if len(matches) != 1:
        raise ConfigError(
            f"pi config {config_name!r} is ambiguous or unknown ({', '.join(matches) or 'no match'}); "
            "use build_pi0_bench / build_pi05_bench or a qualified name such as 'pi05:full'"
        )
    return matches[0]


def resolve_config(name: str, options: TargetOptions) -> PiConfig:
    """The named config with the options applied (views, steps, horizon); action_dim is checked here."""
    options.reject_unsupported(name, _SUPPORTED)
    if options.dtype not in _DTYPES:
        raise ConfigError(
            f"--dtype {options.dtype} is not supported by {name}: pi0/pi0.5 produce NaN in float16 "
            f"(the attention masks overflow); use {' or '.join(_DTYPES)}"
        )
    if options.views is not None and options.views > MAX_VIEWS:
        raise ConfigError(
            f"--views {options.views} is more than the {MAX_VIEWS} camera views pi0/pi0.5 are built for "
            "(base + two wrists); use 1 to 3"
        )
    cfg = pi_configs().get(name)
    cfg = replace(
        cfg,
        views=options.views or cfg.views,
        num_steps=options.num_steps or cfg.num_steps,
        chunk_size=options.horizon or cfg.chunk_size,
    )
    if options.action_dim is not None and options.action_dim > cfg.max_action_dim:
        raise ConfigError(
            f"--action-dim {options.action_dim} exceeds {name}'s max_action_dim {cfg.max_action_dim}; "
            "actions are zero-padded up to max_action_dim, not beyond"
        )
    if options.prompt_tokens is not None and options.prompt_tokens > cfg.max_token_len:
        raise ConfigError(
            f"--prompt-tokens {options.prompt_tokens} exceeds {name}'s {cfg.max_token_len} prompt slots; "
            f"use 1 to {cfg.max_token_len}"
        )
    return cfg


def estimate_bytes(cfg: PiConfig, batch: int, dtype: torch.dtype) -> float:
    """Weights plus the largest live activations of one inference (upper-bound style, for refusing runs
    that cannot fit): vision attention, prefix attention and MLP, the KV cache, the suffix attention."""
    with torch.device("meta"):
        params = sum(p.numel() for p in PiModel(cfg).parameters())
    elem = torch.finfo(dtype).bits // 8
    p, s, t = cfg.prefix_len, cfg.suffix_len, cfg.vision.tokens_per_view
    vision = batch * cfg.views * t * (cfg.vision.num_heads * t * 4 + 4 * cfg.vision.mlp_dim * elem)
    prefix = batch * p * (cfg.vlm.num_heads * p * 4 + 4 * cfg.vlm.mlp_dim * elem)
    kv = 2 * cfg.vlm.depth * batch * cfg.vlm.num_kv_heads * p * cfg.vlm.head_dim * elem
    suffix = batch * s * (cfg.expert.num_heads * (p + s) * 4 + 4 * cfg.expert.mlp_dim * elem)
    return float(params * elem + max(vision, prefix, suffix) + kv)


def build_model(cfg: PiConfig, dtype: torch.dtype, device: str | torch.device, seed: int) -> PiModel:
    """Random-weight model built on `meta`, then materialised once in `dtype` on `device` (no fp32 detour)."""
    with torch.device("meta"):
        model = PiModel(cfg)
    model = model.to(dtype=dtype).to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    return init_weights(model, gen).eval()


def random_observation(
    cfg: PiConfig, batch: int, device: str | torch.device, seed: int, prompt_tokens: int | None = None
) -> PiObservation:
    """Full-size inputs: every view present, a prompt of `prompt_tokens` real tokens (default
    max_token_len - 8) in max_token_len slots."""
    g = torch.Generator(device=device).manual_seed(seed + 1)
    size = cfg.image_side
    real = prompt_tokens if prompt_tokens is not None else max(1, cfg.max_token_len - 8)
    lang_masks = torch.zeros(batch, cfg.max_token_len, dtype=torch.bool, device=device)
    lang_masks[:, :real] = True
    return PiObservation(
        images=torch.rand(batch, cfg.views, 3, size, size, generator=g, device=device) * 2 - 1,
        image_masks=torch.ones(batch, cfg.views, dtype=torch.bool, device=device),
        lang_tokens=torch.randint(0, cfg.vocab_size, (batch, cfg.max_token_len), generator=g, device=device)
        * lang_masks,
        lang_masks=lang_masks,
        state=torch.randn(batch, cfg.max_state_dim, generator=g, device=device),
    )


def describe(cfg: PiConfig, model: PiModel, dtype: str) -> dict[str, Any]:
    def count(m: torch.nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    return {
        "family": "pi05" if cfg.pi05 else "pi0",
        "parameters": count(model),
        "parameters_vision": count(model.vision_tower) + count(model.projector),
        "parameters_vlm": count(model.vlm) + count(model.embed_tokens),
        "parameters_expert": count(model.expert),
        "dtype": dtype,
        "views": cfg.views,
        "image_size": cfg.vision.image_size,
        "tokens_per_view": cfg.vision.tokens_per_view,
        "prompt_tokens": cfg.max_token_len,
        "prefix_len": cfg.prefix_len,
        "chunk_size": cfg.chunk_size,
        "max_action_dim": cfg.max_action_dim,
        "num_steps": cfg.num_steps,
        "vision": f"width {cfg.vision.width} x {cfg.vision.depth} layers",
        "vlm": f"width {cfg.vlm.width} x {cfg.vlm.depth} layers, mlp {cfg.vlm.mlp_dim}",
        "expert": f"width {cfg.expert.width} x {cfg.expert.depth} layers, mlp {cfg.expert.mlp_dim}",
    }


def _bench(name: str, options: TargetOptions) -> BenchCase:
    cfg = resolve_config(name, options)
    dtype = _DTYPES[options.dtype]
    check_fits_memory(
        estimate_bytes(cfg, options.batch, dtype), f"{name} at --batch {options.batch}", options.device
    )
    return bench_model(name, cfg, build_model(cfg, dtype, options.device, options.seed), options)


def bench_model(name: str, cfg: PiConfig, model: PiModel, options: TargetOptions) -> BenchCase:
    """One timed inference of `model` (random weights or a loaded checkpoint) on a random observation."""
    obs = random_observation(cfg, options.batch, options.device, options.seed, options.prompt_tokens)
    noise = make_noise(
        model, options.batch, torch.Generator(device=options.device).manual_seed(options.seed + 2)
    )
    cache = model.allocate_cache(options.batch)
    action_dim = options.action_dim or cfg.max_action_dim
    info = describe(cfg, model, str(model.dtype).removeprefix("torch."))

    check_inputs(model, obs, noise, cache=cache)  # once: the timed loop measures the model, not the checks

    def eager_run(timer: StageTimer) -> torch.Tensor:
        return sample_actions(model, obs, noise=noise, timer=timer, cache=cache, validate=False)[
            ..., :action_dim
        ]

    run: Callable[[StageTimer], torch.Tensor] = eager_run
    if options.buckets is not None:
        run = _bucketed_run(cfg, model, options, obs, noise, action_dim, info)
    info["action_dim"] = action_dim
    info["batch"] = options.batch
    info["prompt_real_tokens"] = int(obs.lang_masks[0].sum())
    info["work"] = {
        stage: w.to_dict()
        for stage, w in pi_stage_work(
            cfg,
            options.dtype,
            options.batch,
            prompt_slots=info.get("prompt_bucket", cfg.max_token_len),
            # the sub-engines behind --buckets read the time conditioning from precomputed tables
            time_conditioning=options.buckets is None,
        ).items()
    }
    return BenchCase(name=name, run=run, info=info, device=options.device)


def _bucketed_run(
    cfg: PiConfig,
    model: PiModel,
    options: TargetOptions,
    obs: PiObservation,
    noise: torch.Tensor,
    action_dim: int,
    info: dict[str, Any],
) -> Callable[[StageTimer], torch.Tensor]:
    """The same eager model run through the sub-engines with prompt-length buckets (issue 8 item 4)."""
    from hotloop.families.pi.buckets import BucketedPiPipeline, prompt_buckets
    from hotloop.families.pi.engines import PiEngineShape, build_pi_subengines

    engines = build_pi_subengines(model, PiEngineShape.of(cfg, options.batch), model.dtype)
    pipeline = BucketedPiPipeline.eager(cfg, engines, options.buckets or ())
    info["prompt_buckets"] = list(prompt_buckets(cfg.max_token_len, options.buckets or ()))
    info["prompt_bucket"] = pipeline.bucket_for(obs)

    def run(timer: StageTimer) -> torch.Tensor:
        return pipeline.sample(obs, noise, timer)[..., :action_dim]

    return run


def _policy(name: str, options: TargetOptions) -> PiPolicy:
    cfg = resolve_config(name, options)
    check_fits_memory(estimate_bytes(cfg, 1, _DTYPES[options.dtype]), name, options.device)
    model = build_model(cfg, _DTYPES[options.dtype], options.device, options.seed)
    return PiPolicy(
        model,
        cfg,
        action_dim=options.action_dim,
        horizon=options.horizon,
        seed=options.seed,
        default_prompt_tokens=[1, 2, 3],
    )


def build_bench(config_name: str, options: TargetOptions) -> BenchCase:
    return _bench(qualify(config_name, None), options)


def build_policy(config_name: str, options: TargetOptions) -> PiPolicy:
    return _policy(qualify(config_name, None), options)


def build_pi0_bench(config_name: str, options: TargetOptions) -> BenchCase:
    return _bench(qualify(config_name, "pi0"), options)


def build_pi05_bench(config_name: str, options: TargetOptions) -> BenchCase:
    return _bench(qualify(config_name, "pi05"), options)


def build_pi0_policy(config_name: str, options: TargetOptions) -> PiPolicy:
    return _policy(qualify(config_name, "pi0"), options)


def build_pi05_policy(config_name: str, options: TargetOptions) -> PiPolicy:
    return _policy(qualify(config_name, "pi05"), options)
